"""How many elements a pipeline yields per epoch, from its spec (for len()).

Known when the source is indexed (a converted dataset knows its shards' sample counts) and every
op either keeps the count or changes it predictably (batch, take, skip, repeat with a count);
otherwise a TypeError says which op or source makes it unknowable in advance.
"""

# Ops that yield exactly one element per input element.
_KEEPS_COUNT = {"shuffle", "resize", "center_crop", "random_resized_crop", "flip", "normalize",
                "cast", "map_field", "prefetch", "python_map"}


def rank_share(n, rank, world_size):
    """Samples of rank `rank`: positions [rank*n//W, (rank+1)*n//W) of the epoch's order (the
    split the in-process iterator and stoker.torch use)."""
    return (rank + 1) * n // world_size - rank * n // world_size


def elements_per_epoch(spec, source_size, rank=0, world_size=1):
    if source_size is None and spec.get("source", {}).get("wait"):
        raise TypeError("len() is unknown: the source is a snapshot read while it is written "
                        "(wait=True), whose size is known only once it is complete; iterate "
                        "instead, or read it without wait once `stoker snapshot` has finished")
    if source_size is None:
        raise TypeError("len() is unknown: the source is a stream of .tar/.tfrecord files, whose "
                        "sample count is not known without reading them all; iterate instead, or "
                        "`stoker convert` them to a dataset (its manifest records the counts)")
    n = rank_share(source_size, rank, world_size)
    for i, op in enumerate(spec.get("ops", [])):
        name = op.get("op")
        where = f"ops[{i}] ({name})"
        if name in _KEEPS_COUNT:
            continue
        if name == "decode_image":
            if op.get("on_error", "fail") == "skip":
                raise TypeError(f"len() is unknown: {where} has on_error='skip', so undecodable "
                                "images are dropped and the count depends on the data")
        elif name in ("batch", "padded_batch"):
            size = int(op["size"])
            n = n // size if op.get("drop_remainder", False) else -(-n // size)
        elif name == "take":
            n = min(n, int(op["count"]))
        elif name == "skip":
            n = max(0, n - int(op["count"]))
        elif name == "repeat":
            count = int(op.get("count", -1))
            if count < 0:
                raise TypeError(f"len() is unknown: {where} repeats forever")
            n *= count
        elif name == "filter":
            raise TypeError(f"len() is unknown: {where} drops elements depending on their data")
        elif name == "bucket_by_length":
            raise TypeError(f"len() is unknown: {where} makes batches whose number depends on "
                            "the lengths in the data")
        else:
            raise TypeError(f"len() is unknown: {where} is a plugin op, which may drop or add "
                            "elements")
    return n
