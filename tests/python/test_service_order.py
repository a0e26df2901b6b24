"""One order whatever the worker count (docs/protocol.md, "Deterministic order"): with real
processes, a seed gives the same keys and the same bytes through 1, 2 or 4 workers, across a worker
killed with SIGKILL mid-epoch, and the same as in-process (`stoker run`, Pipeline.iterator)."""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

import stoker
from conftest import converted_images
from service_cluster import Cluster, slow_image_spec

pytestmark = pytest.mark.skipif(not stoker._stoker.HAVE_SERVICE,
                                reason="built without the service")


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory, stoker_bin, make_images_bin):
    """3 classes x 100 JPEGs of 96x72 as shards: enough work that an epoch outlasts a kill."""
    return converted_images(tmp_path_factory.mktemp("order-data"), stoker_bin, make_images_bin,
                            100)


def keys_and_bytes(batches):
    return [(tuple(b["__keys__"]), b["jpg"].tobytes()) for b in batches]


def test_same_keys_and_bytes_with_1_2_4_workers_and_a_killed_worker(many_shards, stoker_bin,
                                                                       tmp_path):
    pipe = stoker.Pipeline.from_spec(slow_image_spec(many_shards))
    local = keys_and_bytes(pipe.iterator(epoch=1))
    assert len(local) == 75
    for workers in (1, 2, 4):
        with Cluster(stoker_bin, tmp_path / f"w{workers}") as cluster:
            for _ in range(workers):
                cluster.add_worker("--threads", "1")
            cluster.wait_for_workers(workers)
            served = pipe.distribute(dispatcher=cluster.address)  # deterministic by default
            served.set_epoch(1)
            got = keys_and_bytes(served)
            served.close()
            assert got == local, f"{workers} workers: order or bytes differ from in-process"
    # A worker killed after the first batch: its splits are re-run elsewhere, the order holds.
    with Cluster(stoker_bin, tmp_path / "kill", worker_timeout_ms=1000) as cluster:
        for _ in range(2):
            cluster.add_worker("--threads", "1")
        cluster.wait_for_workers(2)
        served = pipe.distribute(dispatcher=cluster.address)
        served.set_epoch(1)
        it = iter(served)
        got = keys_and_bytes([next(it)])
        cluster.workers[1].send_signal(signal.SIGKILL)
        got += keys_and_bytes(it)
        served.close()
        assert cluster.wait_for_log(r"worker \d+ \(.*\) missed its heartbeats", 10), cluster.log()
        assert got == local, "order or bytes differ after a worker was killed"
        # The killed worker had produced part of the epoch (it was not idle when killed).
        assert re.search(r"leasing its splits again", cluster.log())


def test_deterministic_false_is_fastest_first_and_still_exactly_once(many_shards, stoker_bin,
                                                                        tmp_path):
    pipe = stoker.Pipeline.from_spec(slow_image_spec(many_shards))
    local = keys_and_bytes(pipe.iterator(epoch=0))
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        cluster.add_worker("--threads", "1")
        cluster.add_worker("--threads", "1")
        served = pipe.distribute(dispatcher=cluster.address, deterministic=False)
        got = keys_and_bytes(served)
        served.close()
    assert sorted(got) == sorted(local)


def run_keys(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)
    assert r.returncode == 0, r.stderr
    return r.stdout.split(), r.stderr


def test_cli_order_equals_stoker_run_with_a_small_reorder_buffer_and_a_kill(stoker_bin, tmp_path):
    n = 120000
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"source": {"range": n},
                                "ops": [{"op": "shuffle", "seed": 3}]}))
    expected, _ = run_keys([stoker_bin, "run", str(spec), "--print-keys"])
    assert sorted(expected, key=int) == [str(i) for i in range(n)]
    for workers in (1, 4):
        with Cluster(stoker_bin, tmp_path / f"cli{workers}") as cluster:
            for _ in range(workers):
                cluster.add_worker()
            cluster.wait_for_workers(workers)
            keys, _ = run_keys([stoker_bin, "consume", "--dispatcher", cluster.address, str(spec),
                                "--print-keys"])
            assert keys == expected, f"{workers} workers"
    # The same through a 1 MiB prefetch and 1 MiB reorder buffer while one of two workers is
    # killed: the client holds back what came after the lost splits, up to its cap, and still
    # delivers `stoker run`'s order once they are re-run. The source is fast, so a split can hold
    # the whole epoch and the killed worker may have held none: then no split is run again, and
    # the scenario is repeated (up to 3 times) until the kill cost a split.
    for attempt in range(3):
        with Cluster(stoker_bin, tmp_path / f"clikill{attempt}", worker_timeout_ms=1000) as cluster:
            cluster.add_worker()
            cluster.add_worker()
            cluster.wait_for_workers(2)
            out = tmp_path / f"consume{attempt}.out"
            env = dict(os.environ, STOKER_LOG="info")
            with open(out, "w") as f:
                consume = subprocess.Popen([stoker_bin, "consume", "--dispatcher", cluster.address,
                                            str(spec), "--print-keys", "--prefetch-mb", "1",
                                            "--reorder-mb", "1"],
                                           stdout=f, stderr=subprocess.PIPE, text=True, env=env)
                deadline = time.monotonic() + 20
                while os.path.getsize(out) < 1000 and time.monotonic() < deadline:
                    time.sleep(0.01)  # polling a file another process writes
                cluster.workers[0].send_signal(signal.SIGKILL)
                _, err = consume.communicate(timeout=60)
            assert consume.returncode == 0, err
            assert out.read_text().split() == expected
            assert cluster.wait_for_log(r"missed its heartbeats", 10), cluster.log()
            if not re.search(r"leased again", cluster.log()):
                continue  # the killed worker held no split of the job
            assert "the reorder buffer is full" in err, err
            break
    else:
        raise AssertionError("in 3 tries the killed worker never held a split of the job")


# --- checkpoint and resume through the service ------------------------------------------------------

def read_token(path):
    """The token `stoker consume --checkpoint` wrote (None if none yet)."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def set_workers(cluster, live, wanted):
    """Adds workers or kills some (SIGKILL) so that `wanted` are alive."""
    while len(live) < wanted:
        # A short drain: at the end, the jobs of killed consumers are not waited for.
        live.append(cluster.add_worker("--drain-timeout-ms", "300"))
    while len(live) > wanted:
        live.pop().send_signal(signal.SIGKILL)


@pytest.mark.parametrize("ordered", [True, False])
def test_consumer_killed_at_random_points_resumes_on_other_worker_counts(stoker_bin, tmp_path,
                                                                          ordered):
    import random
    rng = random.Random(1234 if ordered else 4321)
    n = 12000
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"source": {"range": n},
                                "ops": [{"op": "shuffle", "seed": 9}, {"op": "batch", "size": 4}]}))
    expected, _ = run_keys([stoker_bin, "run", str(spec), "--print-keys"])
    ck = str(tmp_path / "ck.json")
    mode = [] if ordered else ["--no-deterministic"]
    delivered = []  # what each run delivered, as far as its last token says
    # Short timeouts: the jobs of killed consumers end soon, so workers stop promptly at the end.
    with Cluster(stoker_bin, tmp_path / "c", worker_timeout_ms=1000,
                 client_timeout_ms=1000) as cluster:
        live = []
        # Five consumers killed with SIGKILL at random points, each on another number of workers,
        # then one that runs to the end.
        for run, workers in enumerate([1, 3, 2, 4, 1, 2]):
            set_workers(cluster, live, workers)
            before = read_token(ck)
            consume = subprocess.Popen([stoker_bin, "consume", "--dispatcher", cluster.address,
                                        str(spec), "--print-keys", "--checkpoint", ck,
                                        "--checkpoint-every", "7", *mode],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if run < 5:
                # stdout is a pipe read line by line: the consumer cannot run far ahead of the
                # point where it is killed.
                target = rng.randrange(200, (n - len(sum(delivered, []))) // 3)
                lines = [consume.stdout.readline() for _ in range(target)]
                consume.send_signal(signal.SIGKILL)
                out = "".join(lines) + consume.stdout.read()
                consume.wait()
                assert consume.returncode == -signal.SIGKILL
            else:
                out, err = consume.communicate(timeout=60)
                assert consume.returncode == 0, err
            consume.stderr.close()
            after = read_token(ck)
            assert after is not None, f"run {run}: no checkpoint written"
            got = (after["samples"] - (before["samples"] if before else 0))
            keys = out.split()
            assert len(keys) >= got, f"run {run}: the token counts more than was printed"
            delivered.append(keys[:got])
    every = sum(delivered, [])
    assert sorted(every, key=int) == [str(i) for i in range(n)], "not exactly the epoch"
    if ordered:
        assert every == expected, "the resumed runs' concatenation is not the uninterrupted order"
    assert read_token(ck)["done"] == [[0, n]]


def test_python_state_dict_resumes_on_another_worker_count(many_shards, stoker_bin, tmp_path):
    pipe = stoker.Pipeline.from_spec(slow_image_spec(many_shards))
    local = keys_and_bytes(pipe.iterator(epoch=1))
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        cluster.add_worker("--threads", "1")
        cluster.wait_for_workers(1)
        served = pipe.distribute(dispatcher=cluster.address)
        served.set_epoch(1)
        it = iter(served)
        first = keys_and_bytes([next(it) for _ in range(30)])
        state = json.loads(json.dumps(served.state_dict()))  # plain data
        assert state["epoch"] == 1 and "stoker_token" in state
        served.close()
        cluster.add_worker("--threads", "1")
        cluster.add_worker("--threads", "1")
        cluster.wait_for_workers(3)
        resumed = pipe.distribute(dispatcher=cluster.address)
        resumed.load_state_dict(state)
        rest = keys_and_bytes(resumed)
        resumed.close()
        assert first + rest == local
        # A token of another spec is refused, naming the reason.
        other = stoker.Pipeline.from_spec(dict(slow_image_spec(many_shards), seed=12))
        wrong = other.distribute(dispatcher=cluster.address)
        wrong.load_state_dict(state)
        with pytest.raises(ValueError, match=r"another pipeline: \$\.seed is 11 in the checkpoint, "
                                             r"12 in this spec"):
            next(iter(wrong))


def test_mix_through_the_service_keeps_quotas_order_and_resumes(shards, stoker_bin, tmp_path):
    # A range (numeric keys) and the JPEG dataset (other keys), 60% / 40% of 500 samples an epoch.
    spec = tmp_path / "mix.json"
    spec.write_text(json.dumps({"seed": 5, "source": {
        "mix": [{"range": 300, "weight": 0.6}, {"dataset": shards, "weight": 0.4}],
        "epoch_size": 500}}))
    expected, _ = run_keys([stoker_bin, "run", str(spec), "--print-keys"])
    assert len(expected) == 500
    assert sum(k.isdigit() for k in expected) == 300
    ck = str(tmp_path / "ck.json")
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        cluster.add_worker()
        cluster.add_worker()
        cluster.wait_for_workers(2)
        first, _ = run_keys([stoker_bin, "consume", "--dispatcher", cluster.address, str(spec),
                             "--print-keys", "--max-elements", "123", "--checkpoint", ck])
        # Another mix is another pipeline: its token is refused, naming the difference.
        changed = tmp_path / "changed.json"
        changed.write_text(spec.read_text().replace('"weight": 0.6', '"weight": 0.5'))
        shutil.copy(ck, str(tmp_path / "ck2.json"))
        r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address, str(changed),
                            "--checkpoint", str(tmp_path / "ck2.json")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "$.source.mix[0].weight is 0.6 in the checkpoint, 0.5 in this spec" in r.stderr, \
            r.stderr
        cluster.workers[1].send_signal(signal.SIGKILL)  # resumed on one worker
        rest, err = run_keys([stoker_bin, "consume", "--dispatcher", cluster.address, str(spec),
                              "--print-keys", "--checkpoint", ck])
    assert "resuming from checkpoint" in err
    assert first + rest == expected


def test_torch_adapter_state_dict_through_the_service(shards, stoker_bin, tmp_path):
    torch = pytest.importorskip("torch")
    import stoker.torch
    spec = dict(slow_image_spec(shards), ops=slow_image_spec(shards)["ops"][:2] +
                [{"op": "random_resized_crop", "field": "jpg", "size": [16, 16]},
                 {"op": "batch", "size": 4}])
    pipe = stoker.Pipeline.from_spec(spec)
    local = keys_and_bytes(pipe.iterator(epoch=0))
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        cluster.add_worker()
        cluster.wait_for_workers(1)
        ds = stoker.torch.IterableDataset(pipe.distribute(dispatcher=cluster.address),
                                          rank=0, world_size=1)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
        got = []
        for batch in loader:
            got.append((tuple(batch["__keys__"]), batch["jpg"].numpy().tobytes()))
            if len(got) == 6:
                break
        state = ds.state_dict()
        ds.pipeline.close()
        cluster.add_worker()
        cluster.wait_for_workers(2)
        ds2 = stoker.torch.IterableDataset(pipe.distribute(dispatcher=cluster.address),
                                           rank=0, world_size=1)
        ds2.load_state_dict(state)
        for batch in torch.utils.data.DataLoader(ds2, batch_size=None, num_workers=0):
            got.append((tuple(batch["__keys__"]), batch["jpg"].numpy().tobytes()))
        ds2.pipeline.close()
    assert got == local


def test_coordinated_checkpoint_of_4_ranks_resumes_on_2_ranks(stoker_bin, tmp_path):
    n, batch, steps = 4096, 8, 37
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"source": {"range": n},
                                "ops": [{"op": "shuffle", "seed": 2}, {"op": "batch", "size": batch}]}))
    keys, _ = run_keys([stoker_bin, "run", str(spec), "--print-keys"])
    expected = [keys[i:i + batch] for i in range(0, n, batch)]  # stoker run's batches in order

    def ranks(cluster, count, job, extra_for):
        procs = [subprocess.Popen([stoker_bin, "consume", "--dispatcher", cluster.address,
                                   str(spec), "--print-keys", "--job-name", job,
                                   "--num-consumers", str(count), "--consumer-index", str(i),
                                   *extra_for(i)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(count)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            k = out.split()
            outs.append([k[i:i + batch] for i in range(0, len(k), batch)])
        return outs

    def interleave(per_rank):  # round r: rank 0's batch r, rank 1's, ...: the global order
        return [b for r in range(len(per_rank[0])) for b in (rank[r] for rank in per_rank)]

    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        for _ in range(3):
            cluster.add_worker()
        cluster.wait_for_workers(3)
        # 4 ranks take `steps` steps each, then stop with a checkpoint (as a job would at a step).
        four = ranks(cluster, 4, "four", lambda i: ["--max-elements", str(steps),
                                                    "--checkpoint", str(tmp_path / f"ck{i}")])
        assert all(len(r) == steps for r in four)
        tokens = [read_token(str(tmp_path / f"ck{i}")) for i in range(4)]
        assert all(t["done"] == tokens[0]["done"] for t in tokens), tokens
        assert tokens[0]["done"] == [[0, 4 * steps * batch]]
        # 2 ranks resume from that token on 2 workers.
        cluster.workers[2].send_signal(signal.SIGKILL)
        for i in range(2):
            shutil.copy(str(tmp_path / "ck0"), str(tmp_path / f"two{i}"))
        two = ranks(cluster, 2, "two", lambda i: ["--checkpoint", str(tmp_path / f"two{i}")])
    got = interleave(four) + interleave(two)
    assert sorted(sum(got, []), key=int) == [str(i) for i in range(n)], "not exactly the epoch"
    assert got == expected, "4 ranks then 2 ranks do not continue the global order"
