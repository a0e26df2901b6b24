import gc
import hashlib
import json
import os
import random
import re
import subprocess

import numpy as np
import pytest

import stoker
from conftest import image_spec


def run_all(pipe, **kw):
    return list(pipe.iterator(**kw))


def test_builder_produces_the_same_spec(shards):
    built = (stoker.dataset(shards).shuffle(seed=7).decode_image("jpg")
             .random_resized_crop("jpg", [32, 32]).flip("jpg", p=0.5)
             .normalize("jpg", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
             .batch(8).prefetch(4))
    assert built.spec == image_spec(shards)
    assert built.fingerprint == stoker.Pipeline.from_spec(image_spec(shards)).fingerprint


def test_arrays_are_views_that_outlive_the_iterator(shards):
    pipe = stoker.Pipeline.from_spec(image_spec(shards))
    it = pipe.iterator()
    batch = next(it)
    images, labels = batch["jpg"], batch["cls"]
    assert images.dtype == np.float32 and images.shape == (8, 32, 32, 3)
    assert labels.dtype == np.int64 and labels.shape == (8,)
    assert len(batch["__keys__"]) == 8
    for array in (images, labels):
        assert isinstance(array.base, stoker.Buffer)          # no copy: stoker owns the memory
        assert array.ctypes.data == array.base.address()
        assert np.shares_memory(array, np.frombuffer(array.base, dtype=np.uint8))
        assert not array.flags.writeable
    snapshot = images.copy()
    del it, pipe, batch
    gc.collect()
    np.testing.assert_array_equal(images, snapshot)           # the Buffer outlived the iterator


def test_results_equal_the_cli(shards, stoker_bin, tmp_path):
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(image_spec(shards)))
    cli = subprocess.run([stoker_bin, "run", str(spec_path), "--print-keys"], check=True,
                         capture_output=True, text=True).stdout.split()
    pipe = stoker.Pipeline.from_spec(str(spec_path))
    batches = run_all(pipe)
    keys = [k for b in batches for k in b["__keys__"]]
    assert keys == cli and len(keys) == 60
    # Same bytes at any thread count (the order and values depend only on spec, seed and epoch).
    again = run_all(pipe, threads=1)
    for a, b in zip(batches, again):
        assert a["__keys__"] == b["__keys__"]
        np.testing.assert_array_equal(a["jpg"], b["jpg"])
        np.testing.assert_array_equal(a["cls"], b["cls"])


def test_state_dict_resume_gives_exactly_the_rest(shards):
    pipe = stoker.Pipeline.from_spec(image_spec(shards))
    full = run_all(pipe)
    for cut in (0, 3, len(full)):
        it = pipe.iterator()
        head = [next(it) for _ in range(cut)]
        state = json.loads(json.dumps(it.state_dict()))       # plain data, survives serialisation
        del it
        resumed = pipe.iterator()
        resumed.load_state_dict(state)
        rest = list(resumed)
        assert len(head) + len(rest) == len(full)
        for a, b in zip(head + rest, full):
            assert a["__keys__"] == b["__keys__"]
            np.testing.assert_array_equal(a["jpg"], b["jpg"])


def test_epochs_and_ranks(shards):
    pipe = stoker.dataset(shards).shuffle(seed=3).map_field(keep=["cls"]).batch(5)
    keys0 = [k for b in pipe.iterator(epoch=0) for k in b["__keys__"]]
    keys1 = [k for b in pipe.iterator(epoch=1) for k in b["__keys__"]]
    assert sorted(keys0) == sorted(keys1) and keys0 != keys1
    parts = [[k for b in pipe.iterator(rank=r, world_size=3) for k in b["__keys__"]]
             for r in range(3)]
    assert [len(p) for p in parts] == [20, 20, 20]
    assert sum(parts, []) == keys0                            # contiguous shares of the order


def test_bad_spec_raises_value_error_naming_the_path(shards):
    spec = image_spec(shards)
    spec["ops"][2]["size"] = "big"
    with pytest.raises(ValueError, match=r"\$\.ops\[2\]\.size"):
        stoker.Pipeline.from_spec(spec)
    with pytest.raises(ValueError, match="op"):
        stoker.Pipeline.from_spec({"source": {"range": 3}, "ops": [{"op": "no_such_op"}]})
    with pytest.raises(ValueError, match="JSON"):
        stoker.Pipeline.from_spec("{not json")
    with pytest.raises(ValueError, match="rank"):
        stoker.memory_range(4).iterator(rank=2, world_size=2)


def test_runtime_errors_carry_stokers_message(tmp_path):
    missing = tmp_path / "nothing-here"
    with pytest.raises(Exception) as info:
        list(stoker.dataset(str(missing) + "/"))
    assert "nothing-here" in str(info.value)
    # A range source has no image to decode: the error names the field.
    with pytest.raises(Exception, match="value"):
        list(stoker.memory_range(3).decode_image("value"))


def test_range_source_values():
    out = list(stoker.memory_range(10).batch(4))
    assert [b["value"].tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert out[0]["__keys__"] == ["0", "1", "2", "3"]


@pytest.mark.skipif(stoker._stoker.HAVE_SERVICE, reason="built with the service client")
def test_distribute_to_nothing_fails_naming_the_address():
    if not stoker._stoker.HAVE_SERVICE:
        with pytest.raises(NotImplementedError, match="in-process"):
            stoker.memory_range(3).distribute(dispatcher="localhost:1")
        return
    with pytest.raises(stoker.StokerError, match="localhost:1"):
        list(stoker.memory_range(3).distribute(dispatcher="localhost:1"))


@pytest.mark.skipif(not stoker._stoker.HAVE_SERVICE, reason="built without the service client")
def test_distribute_delivers_the_same_samples(shards, stoker_bin, tmp_path):
    """A real dispatcher and worker (separate processes): the job delivers every sample once."""
    if subprocess.run([stoker_bin, "dispatcher", "--help"], capture_output=True).returncode != 0:
        pytest.skip("this stoker CLI has no dispatcher command")
    dispatcher = subprocess.Popen([stoker_bin, "dispatcher", "--port", "0", "--http-port", "0",
                                   "--work-dir", str(tmp_path / "dispatcher")],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    worker = None
    try:
        line = dispatcher.stdout.readline()                  # "dispatcher: serving on port N, ..."
        port = int(re.search(r"port (\d+)", line).group(1))
        address = f"127.0.0.1:{port}"
        worker = subprocess.Popen([stoker_bin, "worker", "--dispatcher", address],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pipe = stoker.Pipeline.from_spec(image_spec(shards))
        local = sorted(k for b in pipe for k in b["__keys__"])
        served = pipe.distribute(dispatcher=address, job_name="pytest")
        batches = list(served)
        assert sorted(k for b in batches for k in b["__keys__"]) == local
        assert all(b["jpg"].shape[1:] == (32, 32, 3) for b in batches)
        assert isinstance(batches[0]["jpg"].base, stoker.Buffer)
        # Compressed on the wire, the same samples and pixels.
        zstd = list(pipe.distribute(dispatcher=address, job_name="pytest-zstd", compression="zstd"))
        assert sorted(k for b in zstd for k in b["__keys__"]) == local
        by_key = {tuple(b["__keys__"]): b["jpg"] for b in batches}
        assert all((by_key[tuple(b["__keys__"])] == b["jpg"]).all() for b in zstd)
        with pytest.raises(ValueError, match="compression"):
            pipe.distribute(dispatcher=address, compression="gzip")
        with pytest.raises(ValueError, match="consumer_index"):
            pipe.distribute(dispatcher=address, num_consumers=2, consumer_index=2)
    finally:
        for p in (worker, dispatcher):
            if p is not None:
                p.terminate()
                p.wait(timeout=30)


# --- the block cache (docs/pipeline.md, "Block cache") -------------------------------------------

EPOCH_DIGESTS = r"""
import hashlib, json, sys
import stoker
pipeline = stoker.Pipeline.from_spec(sys.argv[1])
epochs = []
for epoch in range(int(sys.argv[2])):
    digests = {}
    for element in pipeline.iterator(epoch=epoch):
        digests[element["__keys__"][0]] = hashlib.sha256(element["bin"].tobytes()).hexdigest()
    epochs.append(digests)
print(json.dumps(epochs))
"""


def test_epochs_from_the_block_cache_give_the_bytes_of_the_store(tmp_path, stoker_bin, s3_server):
    """A shuffled S3 dataset read for three epochs in one process through the block cache (records
    inside one 1 MiB block and across two; CRCs checked once per cached block) gives every sample's
    bytes exactly as a process without the cache does, and only the first epoch reads the store."""
    env = dict(os.environ, **s3_server, STOKER_CACHE_BYTES="64m")
    subprocess.run(["/usr/bin/aws", "--endpoint-url", s3_server["AWS_ENDPOINT_URL"], "s3", "mb",
                    "s3://cached"], env=env, check=True, stdout=subprocess.DEVNULL)
    src = tmp_path / "src"
    rng = random.Random(25)
    expected = {}
    for i in range(150):  # 4.5 MB: samples of 10 to 50 KB over 5 blocks
        d = src / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(rng.randrange(10_000, 50_000))
        (d / f"{i:04d}.bin").write_bytes(data)
        expected[hashlib.sha256(data).hexdigest()] = i
    subprocess.run([stoker_bin, "convert", str(src), "s3://cached/ds/"], env=env, check=True,
                   capture_output=True)

    def digests(cache, epochs):
        spec = json.dumps({"source": {"dataset": "s3://cached/ds/", "cache": cache},
                           "ops": [{"op": "shuffle"}]})
        out = subprocess.run(["/usr/bin/python3", "-c", EPOCH_DIGESTS, spec, str(epochs)],
                             env=env, check=True, capture_output=True, text=True, timeout=300)
        return json.loads(out.stdout.strip().splitlines()[-1])

    cached = digests("on", 3)
    uncached = digests("off", 1)[0]
    assert len(uncached) == 150
    assert sorted(expected) == sorted(uncached.values())  # the files' bytes, each once
    for epoch, got in enumerate(cached):
        assert got == uncached, f"epoch {epoch} through the cache differs"

    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"source": {"dataset": "s3://cached/ds/"}}))

    def store_mb(epochs):
        run = subprocess.run([stoker_bin, "run", str(spec_file), "--epochs", str(epochs)], env=env,
                             check=True, capture_output=True, text=True, timeout=300)
        m = re.search(r"block cache: \d+ hits, \d+ misses \(blocks\), ([0-9.]+) MB read",
                      run.stderr)
        assert m, run.stderr
        return float(m.group(1))

    assert store_mb(3) == store_mb(1) > 0
