"""The shared-memory hand-off (docs/protocol.md, "Shared memory") with real processes: a consumer on
the workers' host receives payloads through their segments, every key exactly once with the
in-process bytes, across a worker killed with SIGKILL mid-epoch; the same with it turned off."""
import json
import os
import re
import signal
import subprocess
import urllib.request

import pytest

import stoker
from conftest import converted_images
from service_cluster import Cluster, slow_image_spec
from test_service_order import keys_and_bytes

pytestmark = pytest.mark.skipif(not stoker._stoker.HAVE_SERVICE,
                                reason="built without the service")


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory, stoker_bin, make_images_bin):
    return converted_images(tmp_path_factory.mktemp("shm-data"), stoker_bin, make_images_bin, 100)


def dev_shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.mark.parametrize("shared_memory", [True, False])
def test_exactly_once_with_a_killed_worker(many_shards, stoker_bin, tmp_path, shared_memory):
    pipe = stoker.Pipeline.from_spec(slow_image_spec(many_shards))
    local = keys_and_bytes(pipe.iterator(epoch=0))
    before = dev_shm()
    with Cluster(stoker_bin, tmp_path / "c", worker_timeout_ms=1000) as cluster:
        for _ in range(2):
            cluster.add_worker("--threads", "1")
        cluster.wait_for_workers(2)
        served = pipe.distribute(dispatcher=cluster.address, shared_memory=shared_memory)
        it = iter(served)
        first = next(it)  # kept: with shared memory, a read-only view of a worker's segment
        cluster.workers[1].send_signal(signal.SIGKILL)
        rest = list(it)
        stats = it.stats()
        got = keys_and_bytes([first] + rest)  # `first` is read after its worker may be gone
        served.close()
        assert cluster.wait_for_log(r"worker \d+ \(.*\) missed its heartbeats", 10), cluster.log()
        # The killed worker had produced part of the epoch (it was not idle when killed).
        assert re.search(r"leasing its splits again", cluster.log()), cluster.log()
    assert got == local, "keys or bytes differ from in-process"
    if shared_memory:
        assert stats["shm_elements"] > 0, stats
        assert stats["shm_bytes"] > 0, stats
        assert not first["jpg"].flags.writeable
    else:
        assert stats["shm_elements"] == 0, stats
    assert dev_shm() - before == set(), "shared memory left behind in /dev/shm"


def test_cli_consume_uses_shared_memory_unless_told_not_to(stoker_bin, tmp_path):
    spec = tmp_path / "spec.json"
    # 3,000 elements of 2 KiB: a sample's bytes depend on its key (cast of the key's digits).
    spec.write_text(json.dumps({"source": {"range": 3000},
                                "ops": [{"op": "shuffle", "seed": 3}, {"op": "batch", "size": 4}]}))
    r = subprocess.run([stoker_bin, "run", str(spec), "--print-keys"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    expected = r.stdout.split()
    with Cluster(stoker_bin, tmp_path / "cli") as cluster:
        cluster.add_worker()
        cluster.wait_for_workers(1)
        for extra, shm in (([], True), (["--no-shm"], False)):
            r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address, str(spec),
                                "--print-keys", *extra], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            assert r.stdout.split() == expected, extra
            line = re.search(r"shared memory: (\d+) elements", r.stderr)
            if shm:
                assert line and int(line.group(1)) == 750, r.stderr
            else:
                assert line is None, r.stderr
        # A worker with --shm-bytes 0 sends every payload in its replies.
        cluster.add_worker("--shm-bytes", "0")
        cluster.wait_for_workers(2)
        cluster.workers[0].send_signal(signal.SIGTERM)
        cluster.workers[0].wait(timeout=20)
        r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address, str(spec),
                            "--print-keys"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == expected
        assert "shared memory:" not in r.stderr, r.stderr


def test_cli_digests_equal_with_and_without_shared_memory(many_shards, stoker_bin, tmp_path):
    """The bytes a consumer receives are the in-process bytes, through a worker's segment or
    without it: `stoker consume --digest` (with and without --no-shm) against `stoker run --digest`,
    with the default segment and with one of 1 MiB that holds three ~300 KiB batches (its ring
    wraps every few elements, and sends some inline when full)."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "seed": 3,
        "source": {"dataset": many_shards},
        "ops": [{"op": "shuffle", "seed": 5},
                {"op": "decode_image", "field": "jpg"},
                {"op": "resize", "field": "jpg", "size": [160, 160]},
                {"op": "flip", "field": "jpg", "p": 0.5},
                {"op": "batch", "size": 4}]}))
    r = subprocess.run([stoker_bin, "run", str(spec), "--digest"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    expected = re.search(r"sha256 ([0-9a-f]{64})", r.stdout).group(1)
    for worker_args in ([], ["--shm-bytes", str(1 << 20)]):
        with Cluster(stoker_bin, tmp_path / f"c{len(worker_args)}") as cluster:
            cluster.add_worker(*worker_args)
            cluster.wait_for_workers(1)
            for extra in ([], ["--no-shm"]):
                r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address,
                                    str(spec), "--digest", *extra], capture_output=True,
                                   text=True, timeout=120)
                assert r.returncode == 0, r.stderr
                got = re.search(r"sha256 ([0-9a-f]{64})", r.stdout)
                assert got and got.group(1) == expected, (worker_args, extra, r.stdout, r.stderr)
                line = re.search(r"shared memory: (\d+) elements", r.stderr)
                if extra:
                    assert line is None, r.stderr
                else:
                    assert line and int(line.group(1)) > 0, r.stderr


def worker_metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return sum(float(line.split()[-1]) for line in r.read().decode().splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))


def test_large_samples_reach_the_consumer_as_the_worker_s_file_pages(stoker_bin, tmp_path):
    """Samples of 300 KiB read warm from local shards (the worker holds them as slices of its
    mapping of each shard) reach a consumer on the same host as ranges of those files, which the
    consumer maps itself (docs/protocol.md, "Shared memory"): `stoker consume --digest` equals
    `stoker run --digest`, the worker counts the bytes it handed that way, and what a Python
    consumer received in two epochs stays readable after the worker is killed with SIGKILL."""
    tree = tmp_path / "tree" / "c"
    tree.mkdir(parents=True)
    contents = {}
    for i in range(24):
        data = os.urandom(300 << 10)
        (tree / f"{i:03d}.bin").write_bytes(data)
        contents[f"c/{i:03d}"] = data
    ds = tmp_path / "ds"
    subprocess.run([stoker_bin, "convert", str(tmp_path / "tree"), str(ds)], check=True,
                   capture_output=True, timeout=60)
    spec_json = {"source": {"dataset": str(ds) + "/"},
                 "ops": [{"op": "shuffle", "seed": 4}, {"op": "map_field", "drop": ["cls"]}]}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_json))
    r = subprocess.run([stoker_bin, "run", str(spec), "--digest"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    expected = re.search(r"sha256 ([0-9a-f]{64})", r.stdout).group(1)
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        worker = cluster.add_worker()
        cluster.wait_for_workers(1)
        r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address, str(spec),
                            "--digest"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = re.search(r"sha256 ([0-9a-f]{64})", r.stdout)
        assert got and got.group(1) == expected, (r.stdout, r.stderr)
        assert re.search(r"shared memory: 24 elements", r.stderr), r.stderr
        file_bytes = worker_metric(worker.http_port, "stoker_worker_shm_file_bytes_total")
        assert file_bytes >= 20 * (300 << 10), file_bytes  # shards just written: in the cache

        # Two epochs, as a trainer iterates (each iteration is the next epoch), both kept.
        served = stoker.Pipeline.from_spec(spec_json).distribute(dispatcher=cluster.address)
        epochs = [list(served), list(served)]
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=20)
        for received in epochs:
            assert sorted(b["__keys__"][0] for b in received) == sorted(contents)
            for b in received:  # read after the worker is gone: the consumer's own mapping
                assert not b["bin"].flags.writeable
                assert b["bin"].tobytes() == contents[b["__keys__"][0]], b["__keys__"]
        served.close()
