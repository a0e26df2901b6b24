"""How many elements a pipeline yields per epoch, from its spec (for len()).

Known when the source is indexed (a converted dataset knows its shards' sample counts) and every
op either keeps the count or changes it predictably (batch, take, skip, repeat with a count);
otherwise a TypeError says which op or source makes it unknowable in advance. What each op does to
the count is read from the C++ op registry (its OpTraits), not listed here.
"""

import json

from . import _stoker


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
    # What each op does to the count is declared once, with the op, in the C++ op registry
    # (op_registry.h); TypeError naming the op when the data decides.
    return _stoker.elements_per_epoch(json.dumps(spec.get("ops", [])), n)


# Why an op makes a service job's count unknown in advance (service_elements_per_epoch).
_SERVICE_REASONS = {
    "decode_image": "decode_image with on_error='skip', which drops undecodable images",
    "filter": "a filter, which drops elements depending on their data",
    "bucket_by_length": "bucket_by_length, whose batches depend on the lengths in the data",
    "take": "take, which the workers' splits do not apply to the epoch as a whole",
    "skip": "skip, which the workers' splits do not apply to the epoch as a whole",
    "repeat": "repeat, which the workers' splits do not apply to the epoch as a whole",
}


def service_elements_per_epoch(spec, num_samples, num_consumers=0, partial_round="drop"):
    """Elements one consumer of a service job receives per epoch of num_samples samples (a number,
    or a function giving it: called only once the ops passed), for a job that fixes the count: one consumer (deterministic) or each trainer of a cross-trainer
    cache gets the whole epoch; with coordinated reads (num_consumers N) every consumer gets one
    batch per round.

    The workers cut an epoch into splits; every split but the epoch's last is a multiple of the
    batch op's size times N (worker_produce.cc, "Coordinated splits hold whole rounds"), so its
    batches are full and deal out into whole rounds; only the last split has an incomplete batch
    (dropped with drop_remainder) and an incomplete round (partial_round "drop" drops it, "pad"
    fills it with the split's first batches again). An epoch of T batches is therefore T per
    consumer, or T // N rounds ("drop"), or ceil(T / N) ("pad"). That holds only where a split
    makes the same batches as the in-process epoch: per-sample ops and at most one `batch` op;
    any other op that changes the count raises TypeError naming it."""
    batch, drop_remainder = service_batching(spec)
    n = num_samples() if callable(num_samples) else num_samples
    total = n // batch if drop_remainder else -(-n // batch)
    if num_consumers <= 0:
        return total
    if partial_round == "pad":
        return -(-total // num_consumers)
    return total // num_consumers


def service_batching(spec):
    """(batch size, drop_remainder) of a spec whose count the service fixes (per-sample ops and at
    most one batch op; batch size 1 without one); TypeError naming the op otherwise."""
    batch, drop_remainder, batch_at = 1, False, None
    for i, op in enumerate(spec.get("ops", [])):
        name = op.get("op")
        where = f"ops[{i}] ({name})"
        if _stoker.count_effect(json.dumps(op)) == "keeps":
            continue
        if name == "batch" and batch_at is None:
            batch, drop_remainder, batch_at = int(op["size"]), bool(op.get("drop_remainder",
                                                                           False)), i
            continue
        if name == "batch":
            why = f"a second batch op (the first is ops[{batch_at}])"
        elif name == "padded_batch":
            why = "a padded_batch op, whose batches the service's splits do not align with"
        else:
            why = _SERVICE_REASONS.get(name, "a plugin op, which may drop or add elements")
        raise TypeError(f"len() is unknown on the service: {where} is {why}; only per-sample "
                        "ops and one batch op give a count known in advance")
    return batch, drop_remainder
