"""Cross-trainer cache without loss (docs/protocol.md, "Cross-trainer cache"): with real processes,
three trainers read one job, one of them at a third of the others' rate; each receives every
element of the epoch exactly once (keys and bytes, compared with `stoker run`'s in-process order),
and the workers ran the pipeline once per element plus the recomputes they counted. The same holds
when a worker or the dispatcher is killed (`kill -9`) mid-epoch, and for a trainer that joins after
the others have read part of the epoch."""
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

import stoker
from service_cluster import Cluster

pytestmark = pytest.mark.skipif(not stoker._stoker.HAVE_SERVICE,
                                reason="built without the service")

# A trainer in a process of its own: reads the whole job through distribute(), sleeping `step`
# seconds per element (its training step), and writes each element's keys and a digest of its
# bytes, then its counters.
TRAINER = r"""
import hashlib, json, os, sys, time
import stoker
spec, dispatcher, trainer, step, policy, out = sys.argv[1:7]
open(out + ".ready", "w").close()  # imported: start together (a test barrier, not a delay)
while not os.path.exists(os.path.join(os.path.dirname(out), "go")):
    time.sleep(0.01)
pipe = stoker.Pipeline.from_spec(json.loads(spec))
served = pipe.distribute(dispatcher=dispatcher, job_name="trials", cross_trainer_cache=True,
                         trainer_id=trainer, on_fall_behind=policy, prefetch_mb=1, num_epochs=1)
it = iter(served)
start = time.monotonic()
with open(out, "w") as f:
    for b in it:
        f.write(json.dumps([list(b["__keys__"]), hashlib.sha256(b["jpg"].tobytes()).hexdigest()])
                + "\n")
        f.flush()  # the test watches the progress from outside
        time.sleep(float(step))
    f.write(json.dumps({"stats": dict(it.stats(), seconds=time.monotonic() - start)}) + "\n")
served.close()
"""


@pytest.fixture(scope="module")
def photo_shards(tmp_path_factory, stoker_bin, make_images_bin):
    work = tmp_path_factory.mktemp("cache-data")
    subprocess.run([make_images_bin, str(work / "images"), "--classes", "3", "--per-class", "80",
                    "--width", "96", "--height", "72"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([stoker_bin, "convert", str(work / "images"), str(work / "shards")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return str(work / "shards") + "/"


def crop_spec(url):
    """Random crops and flips (bytes depend on seed, epoch and sample): 60 batches of 196 KB."""
    return {
        "seed": 3,
        "source": {"dataset": url},
        "ops": [
            {"op": "shuffle", "seed": 5},
            {"op": "decode_image", "field": "jpg"},
            {"op": "random_resized_crop", "field": "jpg", "size": [128, 128]},
            {"op": "flip", "field": "jpg", "p": 0.5},
            {"op": "batch", "size": 4},
        ],
    }


def add_worker(cluster, *extra):
    """A worker as Cluster.add_worker starts it; returns its /metrics port."""
    i = len(cluster.workers)
    w = cluster._start([cluster.bin, "worker", "--dispatcher", cluster.address, "--http-port", "0",
                        "--heartbeat-ms", "200", *extra],
                       os.path.join(cluster.dir, f"worker{i}.log"))
    line = cluster._first_line(w)  # "worker: serving on HOST:PORT, /healthz on port N, ..."
    cluster.workers.append(w)
    return int(re.search(r"/healthz on port (\d+)", line).group(1))


def metric(port, name):
    """The sum of a counter's series over every job on a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M))


def start_trainers(cluster, spec, steps, policy, folder, first=0):
    """Trainer processes `trial-{first}`, ... (one per step), imported and waiting for `folder/go`."""
    os.makedirs(folder, exist_ok=True)
    procs, outs = [], []
    for i, step in enumerate(steps, start=first):
        out = os.path.join(folder, f"trainer{i}.jsonl")
        procs.append(subprocess.Popen(
            [sys.executable, "-c", TRAINER, json.dumps(spec), cluster.address, f"trial-{i}",
             str(step), policy, out], env=dict(os.environ), stderr=subprocess.PIPE))
        outs.append(out)
    deadline = time.monotonic() + 30
    while not all(os.path.exists(o + ".ready") for o in outs) and time.monotonic() < deadline:
        time.sleep(0.01)  # waiting for the trainers' imports
    return procs, outs


def go(folder):
    open(os.path.join(folder, "go"), "w").close()


def read_so_far(out):
    """How many elements a trainer has written (it flushes each one)."""
    try:
        with open(out) as f:
            return sum(1 for line in f if line.startswith("[["))
    except FileNotFoundError:
        return 0


def wait_until_read(out, n, timeout=30):
    deadline = time.monotonic() + timeout
    while read_so_far(out) < n:
        assert time.monotonic() < deadline, f"{out}: {read_so_far(out)} elements after {timeout} s"
        time.sleep(0.01)  # polling a trainer's output


def finish_trainers(procs, outs, timeout=60):
    """Each trainer's elements and counters; every trainer must exit 0."""
    results = []
    for p, out in zip(procs, outs):
        _, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"{out}: rc {p.returncode}: " + err.decode(errors="replace")
        with open(out) as f:
            lines = [json.loads(line) for line in f]
        results.append((lines[:-1], lines[-1]["stats"]))
    return results


def run_trainers(cluster, spec, steps, policy, tmp_path):
    procs, outs = start_trainers(cluster, spec, steps, policy, str(tmp_path))
    go(str(tmp_path))
    return finish_trainers(procs, outs)


def local_epoch(spec):
    """The in-process epoch 0: each element's keys and a digest of its bytes, in order."""
    return [[list(b["__keys__"]), hashlib.sha256(b["jpg"].tobytes()).hexdigest()]
            for b in stoker.Pipeline.from_spec(spec).iterator(epoch=0)]


def journal_records(cluster):
    """The dispatcher's journal, in order (one update a line: length, checksum, JSON)."""
    with open(os.path.join(cluster.dir, "journal", "journal.log")) as f:
        return [json.loads(line.split(" ", 2)[2]) for line in f if line.strip()]


def assert_whole_epoch(got, local, who):
    keys = [tuple(k) for k, _ in got]
    assert len(keys) == len(set(keys)), f"{who}: {len(keys) - len(set(keys))} elements twice"
    missing = {tuple(k) for k, _ in local} - set(keys)
    assert not missing, f"{who}: {len(missing)} of {len(local)} elements never delivered"
    assert got == local, f"{who}: elements differ from the in-process epoch (order or bytes)"


def test_three_trainers_one_slow_each_get_the_whole_epoch(photo_shards, stoker_bin, tmp_path):
    spec = crop_spec(photo_shards)
    local = local_epoch(spec)
    assert len(local) == 60
    with Cluster(stoker_bin, tmp_path / "recompute") as cluster:
        # A window of about one element (196 KB): the slow trainer, whose prefetch and requests in
        # flight hold a few MB, falls out of it within the first second.
        ports = [add_worker(cluster, "--threads", "1", "--cache-bytes", "256K") for _ in range(2)]
        assert cluster.wait_for_log(r"worker 2 (joined )?at ", 20), cluster.log()
        results = run_trainers(cluster, spec, [0.015, 0.015, 0.045], "recompute", tmp_path)
        for i, (got, stats) in enumerate(results):
            # Every element once, in the in-process order, with the same bytes.
            assert got == local, f"trainer {i}: elements differ from the in-process epoch"
            assert stats["cache_skipped"] == 0
        slow = results[2][1]
        assert slow["cache_recomputed"] > 0, f"the slow trainer never fell behind: {slow}"
        produced = sum(metric(p, "stoker_worker_produced_elements_total") for p in ports)
        recomputed = sum(metric(p, "stoker_worker_cache_recomputed_total") for p in ports)
        hits = sum(metric(p, "stoker_worker_cache_hits_total") for p in ports)
        misses = sum(metric(p, "stoker_worker_cache_misses_total") for p in ports)
        # Produced once for all three trainers; the recomputes are counted on their own (they
        # include the elements of a split before the first one a trainer missed).
        assert produced == 60, produced
        assert recomputed >= sum(s["cache_recomputed"] for _, s in results) > 0
        assert hits == sum(s["cache_hits"] for _, s in results)
        assert misses == sum(s["cache_recomputed"] for _, s in results)
        assert hits + misses == 3 * 60


def test_skip_policy_counts_what_the_slow_trainer_missed(photo_shards, stoker_bin, tmp_path):
    spec = crop_spec(photo_shards)
    with Cluster(stoker_bin, tmp_path / "skip") as cluster:
        ports = [add_worker(cluster, "--threads", "1", "--cache-bytes", "256K")]
        assert cluster.wait_for_log(r"worker 1 (joined )?at ", 20), cluster.log()
        results = run_trainers(cluster, spec, [0.015, 0.015, 0.045], "skip", tmp_path)
        local = {tuple(b["__keys__"]) for b in stoker.Pipeline.from_spec(spec).iterator(epoch=0)}
        for got, stats in results:
            keys = [tuple(k) for k, _ in got]
            assert len(keys) == len(set(keys)) and set(keys) <= local, "an element twice or wrong"
            # tf.data's behaviour: skipped, not recomputed, and every element accounted for.
            assert stats["cache_recomputed"] == 0
            assert len(got) + stats["cache_skipped"] == 60
        assert results[2][1]["cache_skipped"] > 0, f"the slow trainer skipped nothing: {stats}"
        assert metric(ports[0], "stoker_worker_cache_skipped_total") == sum(
            s["cache_skipped"] for _, s in results)
        assert metric(ports[0], "stoker_worker_produced_elements_total") == 60


def test_cli_trainers_and_their_report(photo_shards, stoker_bin, tmp_path):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(crop_spec(photo_shards)))
    with Cluster(stoker_bin, tmp_path / "cli") as cluster:
        add_worker(cluster, "--threads", "1")
        assert cluster.wait_for_log(r"worker 1 (joined )?at ", 20), cluster.log()
        argv = [stoker_bin, "consume", str(spec_file), "--dispatcher", cluster.address,
                "--job-name", "cli-trials", "--cross-trainer-cache", "--print-keys"]
        procs = [subprocess.Popen(argv + ["--trainer-id", f"t{i}"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for i in range(2)]
        outs = [p.communicate(timeout=60) for p in procs]
        expected = [k for b in stoker.Pipeline.from_spec(crop_spec(photo_shards)).iterator()
                    for k in b["__keys__"]]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err.decode()
            assert out.decode().split() == expected
            assert re.search(r"cross-trainer cache \(trainer t\d\): \d+ elements from the workers' "
                             r"windows, \d+ recomputed, 0 skipped", err.decode()), err.decode()
        # Without a trainer id the consumer is refused with a message saying what to give.
        bad = subprocess.run(argv, capture_output=True, timeout=30)
        assert bad.returncode != 0 and b"trainer_id" in bad.stderr


def test_trainers_on_the_workers_host_share_one_copy_and_a_killed_one_changes_nothing(
        photo_shards, stoker_bin, tmp_path):
    """Three trainers on the worker's host (docs/protocol.md, "Shared memory"): the worker copies
    each batch into shared memory once and hands the others a reference to it. One trainer killed
    with kill -9 is removed by the dispatcher; the worker gives the other two a new segment (the
    dead one's references are never released) and they go on sharing, every element's bytes those
    of the in-process epoch."""
    spec = crop_spec(photo_shards)
    local = local_epoch(spec)
    with Cluster(stoker_bin, tmp_path / "cluster", client_timeout_ms=1000) as cluster:
        port = add_worker(cluster, "--threads", "1")
        assert cluster.wait_for_log(r"worker 1 (joined )?at ", 20), cluster.log()
        folder = str(tmp_path / "trainers")
        procs, outs = start_trainers(cluster, spec, [0.1, 0.1, 0.1], "recompute", folder)
        go(folder)
        wait_until_read(outs[2], 5)
        procs[2].kill()
        procs[2].wait()
        worker_log = os.path.join(cluster.dir, "worker0.log")
        deadline = time.monotonic() + 20
        while "no longer reads its trainers' shared-memory segment" not in open(worker_log).read():
            assert time.monotonic() < deadline, open(worker_log).read()
            time.sleep(0.1)  # polling the worker's log
        shared_at_removal = metric(port, "stoker_worker_shm_shared_elements_total")
        read_at_removal = read_so_far(outs[0])
        assert read_at_removal < len(local) - 10, "the epoch ended before the removal"
        results = finish_trainers(procs[:2], outs[:2])
        for i, (got, stats) in enumerate(results):
            assert_whole_epoch(got, local, f"trainer {i}")
            assert stats["shm_elements"] == len(local), stats
        assert shared_at_removal >= 5, shared_at_removal
        # After the removal, the two left still share each copy (one of them gets a reference).
        shared = metric(port, "stoker_worker_shm_shared_elements_total")
        assert shared - shared_at_removal >= (len(local) - read_at_removal) // 2, (
            shared_at_removal, shared, read_at_removal)


# Under `skip` the window holds the whole epoch, so no trainer falls behind it: a failure must
# still lose nothing (what `skip` gives up is only what falls out of the window).
FAILURE_POLICIES = pytest.mark.parametrize("policy,window", [("recompute", "1M"), ("skip", "64M")])


@FAILURE_POLICIES
def test_a_worker_killed_mid_epoch_loses_nothing_for_any_trainer(photo_shards, stoker_bin,
                                                                   tmp_path, policy, window):
    spec = crop_spec(photo_shards)
    local = local_epoch(spec)
    with Cluster(stoker_bin, tmp_path / "cluster", worker_timeout_ms=1000) as cluster:
        for _ in range(2):
            add_worker(cluster, "--threads", "1", "--cache-bytes", window)
        assert cluster.wait_for_log(r"worker 2 (joined )?at ", 20), cluster.log()
        folder = str(tmp_path / "trainers")
        procs, outs = start_trainers(cluster, spec, [0.03, 0.03, 0.03], policy, folder)
        go(folder)
        wait_until_read(outs[0], 5)  # early: the killed worker still holds unacknowledged splits
        cluster.workers[0].kill()  # kill -9, mid-epoch, while the trainers read
        cluster.workers[0].wait()
        for i, (got, stats) in enumerate(finish_trainers(procs, outs)):
            assert_whole_epoch(got, local, f"trainer {i}")
            assert stats["cache_skipped"] == 0
        # The killed worker held a split the trainers had not all read: it was run again.
        assert re.search(r"worker 1 .* missed its heartbeats", cluster.log()), cluster.log()
        assert re.search(r"job 1 split \d+ .* leased again, to worker 2", cluster.log()), cluster.log()


def test_a_trainer_that_joins_late_reads_the_whole_epoch(photo_shards, stoker_bin, tmp_path):
    spec = crop_spec(photo_shards)
    local = local_epoch(spec)
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        add_worker(cluster, "--threads", "1", "--cache-bytes", "1M")
        assert cluster.wait_for_log(r"worker 1 (joined )?at ", 20), cluster.log()
        early, late = str(tmp_path / "early"), str(tmp_path / "late")
        procs, outs = start_trainers(cluster, spec, [0.03, 0.03], "recompute", early)
        late_procs, late_outs = start_trainers(cluster, spec, [0.0], "recompute", late, first=2)
        go(early)
        wait_until_read(outs[0], 20)
        go(late)  # joins after the others have read a third of the epoch
        results = finish_trainers(procs + late_procs, outs + late_outs)
        assert read_so_far(outs[0]) == len(local)
        for i, (got, stats) in enumerate(results):
            assert_whole_epoch(got, local, f"trainer {i}")
            assert stats["cache_skipped"] == 0
        assert results[2][1]["cache_recomputed"] > 0, f"the late trainer: {results[2][1]}"


@FAILURE_POLICIES
def test_the_dispatcher_killed_and_restarted_mid_epoch_loses_nothing(photo_shards, stoker_bin,
                                                                      tmp_path, policy, window):
    spec = crop_spec(photo_shards)
    local = local_epoch(spec)
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        for _ in range(2):
            add_worker(cluster, "--threads", "1", "--cache-bytes", window)
        assert cluster.wait_for_log(r"worker 2 (joined )?at ", 20), cluster.log()
        folder = str(tmp_path / "trainers")
        procs, outs = start_trainers(cluster, spec, [0.03, 0.03, 0.03], policy, folder)
        go(folder)
        wait_until_read(outs[0], 15)
        cluster.restart_dispatcher()
        for i, (got, stats) in enumerate(finish_trainers(procs, outs)):
            assert_whole_epoch(got, local, f"trainer {i}")
            assert stats["cache_skipped"] == 0
        # The restarted dispatcher replayed the job from its journal and saw it to its end.
        log = cluster.log()
        replayed = re.search(r"replayed \d+ updates", log)
        assert replayed and re.search(r"job 1 finished", log[replayed.end():]), log


def test_a_restarted_dispatcher_leases_a_dead_workers_splits_again(photo_shards, stoker_bin,
                                                                   tmp_path):
    """The dispatcher and a worker killed together mid-epoch: the restarted dispatcher learns the
    job from its journal, finds the worker gone (no heartbeat within the worker timeout) and hands
    its splits to the other worker, which recomputes them for every trainer."""
    spec = crop_spec(photo_shards)
    local = local_epoch(spec)
    with Cluster(stoker_bin, tmp_path / "cluster", worker_timeout_ms=1000) as cluster:
        # A buffer of about five elements: neither worker runs far ahead of the trainers, so each
        # still has a split they have not all read when the first is killed (a worker that had
        # produced and delivered all of its splits by then would leave nothing to lease again).
        # The kill comes after the first trainer read 3 elements, inside the first split (4
        # batches) of each worker: workers ask for their next split as they start one, so later
        # (after 15 elements, as before) the 60 batches may all be leased and the killed worker's
        # delivered, which it then was in 1 of 5 runs.
        for _ in range(2):
            add_worker(cluster, "--threads", "1", "--cache-bytes", "1M", "--buffer-bytes", "1M")
        assert cluster.wait_for_log(r"worker 2 (joined )?at ", 20), cluster.log()
        folder = str(tmp_path / "trainers")
        procs, outs = start_trainers(cluster, spec, [0.03, 0.03, 0.03], "recompute", folder)
        go(folder)
        wait_until_read(outs[0], 3)
        cluster.workers[0].kill()  # kill -9, mid-epoch
        cluster.workers[0].wait()
        before = len(journal_records(cluster))
        cluster.restart_dispatcher()
        for i, (got, stats) in enumerate(finish_trainers(procs, outs)):
            assert_whole_epoch(got, local, f"trainer {i}")
            assert stats["cache_skipped"] == 0
        after = journal_records(cluster)[before:]
        handed_out = [r for r in after if r["type"] in ("lease_split", "create_split")]
        assert handed_out, f"the restarted dispatcher handed out no split: {after}"
        assert re.search(r"worker 1 .*missed its heartbeats", cluster.log()), cluster.log()
