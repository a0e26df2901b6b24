"""A training run through the service as a PyTorch user has it (issue 24): one job for every
epoch, len() equal to what each consumer receives in every mode that fixes it, batches a trainer
may modify (over TCP and shared memory), resume without a job left behind, and
examples/train_ddp.py under torchrun with 2 ranks, 2 workers and a rank killed with kill -9.
Real `stoker dispatcher` / `stoker worker` processes (service_cluster.py)."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest
import torch

import stoker
import stoker.torch
from conftest import SOURCE_DIR, converted_images
from service_cluster import Cluster

PYTHON = "/usr/bin/python3"


def jobs_created(cluster):
    return re.findall(r"job (\d+)(?: '[^']*')? created", cluster.log())


def metrics(cluster):
    """The dispatcher's /metrics as {(name, labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)(\{[^}]*\})? (\S+)$", line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def job_counts(cluster):
    """stoker_dispatcher_jobs by state: {"running": n, "finished": n, "ended": n, "failed": n}."""
    return {re.search(r'state="(\w+)"', labels).group(1): int(v)
            for (name, labels), v in metrics(cluster).items() if name == "stoker_dispatcher_jobs"}


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def cluster(stoker_bin, tmp_path):
    with Cluster(stoker_bin, tmp_path / "cluster") as c:
        c.add_worker()
        c.add_worker()
        c.wait_for_workers(2)
        yield c


# --- one job for the run ------------------------------------------------------------------------

def test_a_distributed_pipeline_is_one_job_for_every_epoch(cluster):
    served = stoker.memory_range(95).batch(10).distribute(cluster.address)
    counts = [sum(1 for _ in served) for _ in range(3)]
    served.close()
    assert counts == [10, 10, 10] and len(served) == 10
    assert len(jobs_created(cluster)) == 1, cluster.log()


def test_the_torch_adapter_is_one_job_for_every_epoch_and_a_resume_ends_the_old_one(cluster):
    pipe = stoker.memory_range(200).batch(10).distribute(cluster.address)
    ds = stoker.torch.IterableDataset(pipe, rank=0, world_size=1)
    epochs = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        epochs.append([tuple(b["__keys__"]) for b in ds.loader()])
    assert [len(e) for e in epochs] == [len(ds)] * 3 == [20] * 3
    assert len(jobs_created(cluster)) == 1, cluster.log()
    first_job = ds.job_id

    # A checkpoint mid-epoch, then a resume in this process: the job read so far ends at once
    # (its consumer left), and exactly one job carries the resume.
    ds.set_epoch(3)
    it = iter(ds.loader())
    head = [tuple(next(it)["__keys__"]) for _ in range(4)]
    state = ds.state_dict()
    ds.load_state_dict(state)
    rest = [tuple(b["__keys__"]) for b in ds.loader()]
    whole = [tuple(b["__keys__"]) for b in stoker.memory_range(200).batch(10).iterator(epoch=3)]
    assert head + rest == whole
    assert cluster.wait_for_log(rf"job {first_job} ended: its last consumer left", 10), \
        cluster.log()
    assert len(jobs_created(cluster)) == 2, cluster.log()
    ds.close()
    wait_until(lambda: job_counts(cluster)["running"] == 0, 20, "no job running")


# --- len() ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("drop_remainder", [False, True])
def test_len_of_one_deterministic_consumer_is_what_it_receives(cluster, drop_remainder):
    served = stoker.memory_range(1003).batch(10, drop_remainder=drop_remainder).distribute(
        cluster.address)
    expected = 100 if drop_remainder else 101
    assert len(served) == expected                  # before the job exists: from the spec
    got = [b["__keys__"] for b in served]
    assert len(got) == len(served) == expected      # after: from the workers' count
    served.close()


@pytest.mark.parametrize("partial_round", ["drop", "pad"])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_len_of_coordinated_consumers_is_what_each_receives(cluster, partial_round,
                                                            drop_remainder):
    # 1003 samples, batches of 10, 3 consumers: 100 or 101 batches, rounds of 3.
    pipe = stoker.memory_range(1003).shuffle(seed=1).batch(10, drop_remainder=drop_remainder)
    name = f"len-{partial_round}-{drop_remainder}"
    served = [pipe.distribute(cluster.address, job_name=name, num_consumers=3, consumer_index=i,
                              partial_round=partial_round) for i in range(3)]
    lengths = [len(s) for s in served]
    got = [None] * 3

    def consume(i):
        got[i] = [b["__keys__"] for b in served[i]]

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for s in served:
        s.close()
    total = 100 if drop_remainder else 101
    want = -(-total // 3) if partial_round == "pad" else total // 3
    assert lengths == [want] * 3
    assert [len(g) for g in got] == [want] * 3


def test_len_names_the_mode_where_the_service_does_not_fix_it(cluster):
    pipe = stoker.memory_range(100).batch(10)
    with pytest.raises(TypeError, match="shared job"):
        len(pipe.distribute(cluster.address, job_name="shared"))
    with pytest.raises(TypeError, match="sharding 'off'"):
        len(pipe.distribute(cluster.address, sharding="off"))
    with pytest.raises(TypeError, match=r"ops\[0\] \(filter\)"):
        len(stoker.memory_range(100).filter("value", min=3).batch(10).distribute(
            cluster.address))
    with pytest.raises(TypeError, match=r"ops\[1\] \(take\)"):
        len(pipe.take(3).distribute(cluster.address, num_consumers=2, consumer_index=0))
    # The torch adapter: the mode follows rank / world size.
    ds = stoker.torch.IterableDataset(stoker.memory_range(1003).batch(10).distribute(
        cluster.address), rank=1, world_size=2)
    assert len(ds) == 50


# --- batches a trainer may modify -----------------------------------------------------------------

@pytest.fixture(scope="module")
def image_shards(tmp_path_factory, stoker_bin, make_images_bin):
    return converted_images(tmp_path_factory.mktemp("images"), stoker_bin, make_images_bin, 8)


@pytest.mark.parametrize("shared_memory", [False, True], ids=["tcp", "shm"])
def test_batches_over_the_service_are_writable_tensors_and_read_only_arrays(
        cluster, image_shards, shared_memory):
    pipe = stoker.dataset(image_shards).decode_image("jpg").center_crop("jpg", 32).batch(4)
    local = [b["jpg"].copy() for b in pipe]
    served = pipe.distribute(cluster.address, shared_memory=shared_memory)
    # numpy: read-only views, writing raises.
    first = next(iter(served))
    with pytest.raises(ValueError, match="read-only"):
        first["jpg"][0, 0, 0, 0] = 1
    served.close()
    # torch: the batch's own tensors; in-place ops change that tensor only.
    ds = stoker.torch.IterableDataset(pipe.distribute(cluster.address,
                                                      shared_memory=shared_memory))
    for want, batch in zip(local, ds):
        x = batch["jpg"]
        x.mul_(2)
        np.testing.assert_array_equal(x.numpy(), (want * 2).astype(np.uint8))
    stats = ds._iterator.stats()
    if shared_memory:
        assert stats["shm_elements"] > 0, stats
    else:
        assert stats["shm_elements"] == 0, stats
    ds.close()


# --- examples/train_ddp.py under torchrun ---------------------------------------------------------

def torchrun(args, record, checkpoint=None, extra=(), env=None):
    cmd = [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
           "--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
           "--rdzv_endpoint", f"127.0.0.1:{_free_port()}", "--max_restarts", "0",
           "--monitor_interval", "1",
           os.path.join(SOURCE_DIR, "examples", "train_ddp.py"), *args, "--record", str(record)]
    if checkpoint:
        cmd += ["--checkpoint", str(checkpoint)]
    return subprocess.Popen(cmd + list(extra), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dataset_keys(url):
    return sorted(k for b in stoker.dataset(url).map_field(keep=["cls"]).batch(64)
                  for k in b["__keys__"])


def finish(proc, timeout=300):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun did not finish in {timeout} s:\n{out[-5000:]}")
    return proc.returncode, out


@pytest.fixture(scope="module")
def ddp_shards(tmp_path_factory, stoker_bin, make_images_bin):
    """3 classes x 16 JPEGs: 48 samples, 12 batches of 4 an epoch, 6 for each of 2 ranks."""
    return converted_images(tmp_path_factory.mktemp("ddp"), stoker_bin, make_images_bin, 16)


def test_the_ddp_example_is_one_job_with_len_equal_to_the_batches(stoker_bin, tmp_path,
                                                                   ddp_shards):
    keys = dataset_keys(ddp_shards)
    assert len(keys) == 48
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        cluster.add_worker()
        cluster.add_worker()
        cluster.wait_for_workers(2)
        record = tmp_path / "record.json"
        rc, out = finish(torchrun(["--dispatcher", cluster.address, "--data", ddp_shards,
                                   "--epochs", "3", "--batch-size", "4", "--size", "24"],
                                  record, env=_env()))
        assert rc == 0, out[-5000:]
        created = jobs_created(cluster)
        assert len(created) == 1, cluster.log()
        wait_until(lambda: job_counts(cluster)["running"] == 0, 20, "no job running after the run")
        counts = job_counts(cluster)
        assert sum(counts.values()) == 1, counts
    records = [json.load(open(tmp_path / f"record.rank{r}.json")) for r in range(2)]
    for r in records:
        assert r["len"] == 6, r["len"]                      # 48 / 4 / 2
        assert sorted(r["epochs"]) == ["0", "1", "2"]
    for epoch in ("0", "1", "2"):
        per_rank = [r["epochs"][epoch]["keys"] for r in records]
        for r, got in zip(records, per_rank):
            assert len(got) // 4 == r["len"], (epoch, len(got))
            assert r["epochs"][epoch]["job_ids"] == [int(created[0])]
        assert not set(per_rank[0]) & set(per_rank[1]), f"epoch {epoch}: ranks overlap"
        assert sorted(per_rank[0] + per_rank[1]) == keys, f"epoch {epoch} does not cover the data"
    orders = [tuple(records[0]["epochs"][e]["keys"]) for e in ("0", "1", "2")]
    assert len(set(orders)) == 3, "every epoch has its own order"


def test_the_ddp_example_resumed_after_kill_9_leaves_no_second_job(stoker_bin, tmp_path,
                                                                   ddp_shards):
    with Cluster(stoker_bin, tmp_path / "cluster", client_timeout_ms=CLIENT_TIMEOUT_MS) as cluster:
        cluster.add_worker()
        cluster.add_worker()
        cluster.wait_for_workers(2)
        record, ckpt = tmp_path / "record.json", tmp_path / "ckpt.pt"
        args = ["--dispatcher", cluster.address, "--data", ddp_shards, "--epochs", "3",
                "--batch-size", "4", "--size", "24", "--checkpoint-every", "2"]
        run = torchrun(args + ["--step-delay", "0.3"], record, ckpt, env=_env())
        # Rank 1 is killed with kill -9 once a checkpoint exists, in the second epoch.
        wait_until(lambda: (tmp_path / "record.rank1.json").exists() or run.poll() is not None,
                   180, "the first epoch")
        rank1 = _rank_pid(run.pid, 1)
        os.kill(rank1, signal.SIGKILL)
        rc, out = finish(run)
        assert rc != 0, out[-3000:]
        first = jobs_created(cluster)
        assert len(first) == 1, cluster.log()
        saved = torch.load(ckpt)
        assert saved["data"]["job_id"] == int(first[0]), saved["data"]

        resumed = torchrun(args, record, ckpt, env=_env())
        # While the resumed run reads, it is the only job running: the killed run's job is not
        # left running without a consumer.
        wait_until(lambda: len(jobs_created(cluster)) == 2 or resumed.poll() is not None, 120,
                   "the resumed run's job")
        running_during = job_counts(cluster)["running"]
        rc, out = finish(resumed)
        assert rc == 0, out[-5000:]
        assert "resumed from" in out, out[-3000:]
        assert len(jobs_created(cluster)) == 2, cluster.log()
        assert running_during == 1, (running_during, cluster.log())
        assert cluster.wait_for_log(
            rf"job {first[0]} ended: a resume of its checkpoint replaces it", 10), cluster.log()
        wait_until(lambda: job_counts(cluster)["running"] == 0, 20, "no job running after the run")


# Longer than torchrun takes to start again on a loaded 2-core machine (~30 s): the killed run's job
# would still be running, without a consumer, when the resumed run starts, unless the resume ends
# it (replaces_job).
CLIENT_TIMEOUT_MS = 120000


def _rank_pid(torchrun_pid, rank):
    """The pid of the process torchrun started for `rank` (RANK in its environment)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in _descendants(torchrun_pid):
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in env and b"LOCAL_RANK=" + str(rank).encode() in env:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no process of rank {rank} under torchrun {torchrun_pid}")


def _descendants(pid):
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        children.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def _env():
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", os.path.join(SOURCE_DIR, "build", "python"))
    env["OMP_NUM_THREADS"] = "1"
    return env
