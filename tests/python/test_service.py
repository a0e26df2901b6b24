"""The service as a training job uses it, with real processes (docs/protocol.md, docs/python.md):
epochs, shared jobs, coordinated reads for DDP, the job life cycle, clear failures, and a trainer
without storage credentials. Every check is made from the outside: keys, bytes, exit codes, RSS."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import stoker
from conftest import SOURCE_DIR, image_spec
from service_cluster import Cluster, rss_bytes

pytestmark = pytest.mark.skipif(not stoker._stoker.HAVE_SERVICE,
                                reason="built without the service")

PYTHON = "/usr/bin/python3"


def python_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(stoker.__path__[0]), os.path.join(SOURCE_DIR, "tests", "python")])
    return env


def write_spec(tmp_path, spec, name="spec.json"):
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return str(path)


# --- failing fast and clearly ---------------------------------------------------------------------

def test_bad_addresses_fail_fast_naming_the_address_and_cause(stoker_bin, tmp_path):
    pipe = stoker.memory_range(10)
    with pytest.raises(ValueError, match=r"'127\.0\.0\.1': no port"):
        next(iter(pipe.distribute(dispatcher="127.0.0.1")))
    with pytest.raises(ValueError, match="only the grpc:// scheme"):
        next(iter(pipe.distribute(dispatcher="http://127.0.0.1:5000")))
    for address, cause in [("127.0.0.1:1", r"(?i)refused"),
                           ("no-such-host.invalid:5000", r"(?i)(dns|resolv|not found)")]:
        start = time.monotonic()
        with pytest.raises(stoker.StokerError) as err:
            next(iter(pipe.distribute(dispatcher=address)))
        took = time.monotonic() - start
        assert took < 12, f"{address}: {took:.1f} s"
        assert address in str(err.value) and re.search(cause, str(err.value)), str(err.value)
    # The same from the command line: an error naming the address, exit code not 0.
    spec = write_spec(tmp_path, {"source": {"range": 10}})
    r = subprocess.run([stoker_bin, "consume", "--dispatcher", "localhost", spec],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "'localhost': no port" in r.stderr, r.stderr


def test_consumers_started_before_their_dispatcher_reach_it_when_it_comes_up(stoker_bin,
                                                                              tmp_path):
    # A trainer started before the dispatcher (or while it restarts) and told to wait for it
    # (--wait-for-dispatcher, STOKER_WAIT_FOR_DISPATCHER; without it a refused connection fails
    # at once) reaches it when it comes up. gRPC's reconnect attempts only advance while
    # something polls the channel: this once failed after 10 s although the dispatcher had been
    # up for 8.
    port = _free_port()
    address = f"127.0.0.1:{port}"
    n = 200
    spec = write_spec(tmp_path, {"source": {"range": n}})
    cli = Consumer(stoker_bin, address, spec, "early-cli", "--wait-for-dispatcher", "30",
                   workdir=tmp_path)
    script = textwrap.dedent(f"""
        import stoker
        served = stoker.memory_range({n}).batch(10).distribute(dispatcher="{address}",
                                                               job_name="early-py")
        keys = [k for b in served for k in b["__keys__"]]
        print(len(keys), len(set(keys)), flush=True)
    """)
    py = subprocess.Popen([PYTHON, "-c", script],
                          env={**python_env(), "STOKER_WAIT_FOR_DISPATCHER": "30"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # both have had their first attempts refused
    assert cli.proc.poll() is None and py.poll() is None, (cli.stderr(), py.stderr.read())
    with Cluster(stoker_bin, tmp_path / "cluster", port=port) as cluster:
        cluster.add_worker()
        out, err = py.communicate(timeout=60)
        assert py.returncode == 0, err
        assert out.split() == [str(n), str(n)], out
        assert cli.wait(timeout=60) == 0, cli.stderr()
        assert sorted(cli.keys(), key=int) == [str(k) for k in range(n)]


def test_no_worker_is_reported_and_ctrl_c_stops_at_once(stoker_bin, tmp_path):
    spec = write_spec(tmp_path, {"source": {"range": 100}})
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        # Waiting without a worker: a log line every 10 s, an error after --no-worker-timeout.
        start = time.monotonic()
        waiting = subprocess.Popen([stoker_bin, "consume", "--dispatcher",
                                    f"grpc://{cluster.address}", spec, "--no-worker-timeout", "11"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Ctrl-C while waiting: the CLI stops at once with 130.
        sigint = subprocess.Popen([stoker_bin, "consume", "--dispatcher", cluster.address, spec],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Python: KeyboardInterrupt reaches code iterating a distributed pipeline.
        script = textwrap.dedent(f"""
            import stoker
            print("iterating", flush=True)
            for b in stoker.memory_range(100).distribute(dispatcher="{cluster.address}"):
                pass
        """)
        py = subprocess.Popen([PYTHON, "-c", script], env=python_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        assert py.stdout.readline().strip() == "iterating"
        time.sleep(2)  # let both block in their wait for elements
        for p in (sigint, py):
            p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        assert sigint.wait(timeout=5) == 130
        assert time.monotonic() - t0 < 1.5
        assert "interrupted" in sigint.stderr.read()
        t0 = time.monotonic()
        py.wait(timeout=5)
        assert time.monotonic() - t0 < 1.5
        assert "KeyboardInterrupt" in py.stderr.read()

        err = waiting.communicate(timeout=30)[1]
        took = time.monotonic() - start
        assert waiting.returncode != 0
        assert "waiting for a worker: 0 registered" in err, err
        assert "no worker registered at dispatcher" in err and cluster.address in err, err
        assert 10 < took < 20, took


# --- shared jobs -----------------------------------------------------------------------------------

class Consumer:
    """`stoker consume --print-keys` with its output in files (a pipe left unread would stall it,
    and with it the end of a shared job's epoch for every consumer)."""
    count = 0

    def __init__(self, stoker_bin, address, spec, job_name, *extra, workdir):
        Consumer.count += 1
        self.out_path = os.path.join(str(workdir), f"consumer{Consumer.count}.out")
        self.err_path = self.out_path[:-4] + ".err"
        argv = ["stdbuf", "-oL", stoker_bin, "consume", "--dispatcher", address, spec,
                "--job-name", job_name, "--print-keys", *extra]
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err)

    def keys(self):
        with open(self.out_path) as f:
            return f.read().split()

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def wait_for_keys(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        while len(self.keys()) < n:
            assert time.monotonic() < deadline and self.proc.poll() is None, self.stderr()
            time.sleep(0.02)  # polling a file

    def wait(self, timeout=120):
        return self.proc.wait(timeout=timeout)


def test_consumers_of_a_named_job_share_it_exactly_once(stoker_bin, tmp_path):
    n = 60000
    spec = write_spec(tmp_path, {"source": {"range": n}})
    everything = {str(i) for i in range(n)}
    with Cluster(stoker_bin, tmp_path / "cluster", client_timeout_ms=2000) as cluster:
        cluster.add_worker()
        cluster.add_worker()
        # Three consumers of one job: disjoint parts whose union is the epoch. On a loaded machine
        # one consumer may read the whole epoch before the others join (seen at load 8): the job
        # was then not shared, which is no fault, and the run is tried again (at most 3 times).
        for attempt in range(3):
            consumers = [Consumer(stoker_bin, cluster.address, spec, f"shared-{attempt}",
                                  workdir=tmp_path) for _ in range(3)]
            assert [c.wait() for c in consumers] == [0, 0, 0], [c.stderr() for c in consumers]
            parts = [c.keys() for c in consumers]
            assert sum(len(p) for p in parts) == n
            assert set().union(*map(set, parts)) == everything
            if sum(1 for p in parts if p) >= 2:
                break
        assert sum(1 for p in parts if p) >= 2, "the job was not shared in 3 runs"
        # The name is free again once the job finished: a rerun is a new job with the whole epoch.
        again = Consumer(stoker_bin, cluster.address, spec, f"shared-{attempt}", workdir=tmp_path)
        assert again.wait() == 0, again.stderr()
        assert sorted(again.keys()) == sorted(everything)

        # One of three killed with kill -9 mid-epoch: after the client timeout its unfinished
        # splits go to the others, who complete the epoch; nothing is delivered twice among them.
        consumers = [Consumer(stoker_bin, cluster.address, spec, "shared-kill", workdir=tmp_path)
                     for _ in range(3)]
        # The victim is the first consumer seen with 200 keys while it still runs (which one gets
        # splits first depends on start-up order: one that started late may get none at all).
        deadline = time.monotonic() + 60
        victim = None
        while victim is None:
            running = [c for c in consumers if c.proc.poll() is None]
            assert running and time.monotonic() < deadline, [c.stderr() for c in consumers]
            victim = next((c for c in running if len(c.keys()) >= 200), None)
            time.sleep(0.01)
        victim.proc.kill()
        victim.wait()
        victim_keys = victim.keys()
        others = [c for c in consumers if c is not victim]
        assert [c.wait() for c in others] == [0, 0], [c.stderr() for c in consumers]
        survivors = [k for c in others for k in c.keys()]
        assert len(survivors) == len(set(survivors)), "a key went to two consumers"
        assert set(survivors) | set(victim_keys) == everything
        assert len(victim_keys) < n


def test_a_worker_killed_under_a_shared_job_gives_no_element_to_two_consumers(stoker_bin,
                                                                            tmp_path):
    # Two trainers (a step of 10 ms a batch) share a job; their clients fetch ahead, so each holds
    # splits it has not delivered yet when a worker is killed with kill -9. The killed worker's
    # splits are run again on the other worker, and each re-run split must go to the consumer that
    # holds it in part: the union of what the two delivered is the epoch, each key once.
    n = 24000
    script_text = """
        import sys, time, stoker
        served = stoker.memory_range({n}).batch(50).distribute(
            "{address}", job_name="{job}")
        print("ready", file=sys.stderr, flush=True)
        sys.stdin.readline()  # both consumers start reading together
        for batch in served:
            print(" ".join(str(int(v)) for v in batch["value"]), flush=True)
            time.sleep(0.01)
    """

    def attempt(k):
        """One run; False when the scenario did not happen: a consumer finished before both had
        delivered 20 batches (on a loaded machine one consumer's process may start so late that
        the other's client took nearly the whole job), so the kill would not fall mid-job for both.
        """
        with Cluster(stoker_bin, tmp_path / f"cluster{k}", worker_timeout_ms=1000) as cluster:
            workers = [cluster.add_worker(), cluster.add_worker()]
            script = textwrap.dedent(script_text.format(n=n, address=cluster.address,
                                                        job=f"shared-worker-kill-{k}"))
            paths = [tmp_path / f"consumer{k}-{i}.txt" for i in range(2)]
            outs = [open(path, "w") for path in paths]
            consumers = [subprocess.Popen([PYTHON, "-c", script], env=python_env(), stdout=out,
                                          stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True)
                         for out in outs]
            try:
                for c in consumers:
                    assert c.stderr.readline() == "ready\n"
                for c in consumers:
                    c.stdin.write("go\n")
                    c.stdin.flush()
                lines = lambda i: paths[i].read_text().splitlines()
                deadline = time.monotonic() + 60
                while min(len(lines(0)), len(lines(1))) < 20:
                    finished = [c for c in consumers if c.poll() is not None]
                    if finished:
                        assert all(c.returncode == 0 for c in finished), \
                            [c.stderr.read() for c in finished]
                        return False
                    assert time.monotonic() < deadline, (len(lines(0)), len(lines(1)))
                    time.sleep(0.01)
                workers[0].kill()
                for c in consumers:
                    assert c.wait(timeout=120) == 0, c.stderr.read()
            finally:
                for c in consumers:
                    if c.poll() is None:
                        c.kill()
                        c.wait()
                for out in outs:
                    out.close()
            keys = [int(v) for i in range(2) for line in lines(i) for v in line.split()]
            assert sorted(keys) == list(range(n)), (
                f"{len(keys) - len(set(keys))} keys delivered twice, "
                f"{n - len(set(keys))} missing")
            assert min(len(lines(0)), len(lines(1))) > 0, "the job was not shared"
            return True

    assert any(attempt(k) for k in range(3)), \
        "3 times a consumer finished before both had delivered 20 batches"


def test_modes_are_checked_once_naming_the_argument_value_and_choices(stoker_bin, tmp_path):
    # distribute refuses a bad mode at once (no dispatcher needed), with the service's own
    # spellings (the table the CLI reads too).
    pipe = stoker.memory_range(12)
    for kwargs, message in [
            ({"sharding": "sideways"}, "sharding 'sideways': use 'dynamic' or 'off'"),
            ({"compression": "gzip"}, "compression 'gzip': use 'none', 'zstd' or 'lz4'"),
            ({"partial_round": "Pad"}, "partial_round 'Pad': use 'drop' or 'pad'"),
            ({"on_fall_behind": 3}, "on_fall_behind '3': use 'recompute' or 'skip'")]:
        with pytest.raises(ValueError) as err:
            pipe.distribute("127.0.0.1:1", **kwargs)
        assert str(err.value) == "distribute: unknown " + message, str(err.value)
    r = subprocess.run([stoker_bin, "consume", "--dispatcher", "127.0.0.1:1",
                        write_spec(tmp_path, {"source": {"range": 12}}), "--partial-round", "Pad"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, r.stderr
    assert ("--partial-round: unknown partial_round 'Pad': use 'drop' or 'pad'" in r.stderr), \
        r.stderr
    # Good modes reach the workers: sharding off with lz4 from two workers is every key twice.
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        cluster.add_worker()
        cluster.add_worker()
        cluster.wait_for_workers(2)
        served = pipe.distribute(cluster.address, sharding="off", compression="lz4", num_epochs=1)
        keys = [k for element in served for k in element["__keys__"]]
        served.close()
        # Without num_epochs, each iteration is one epoch too (each worker's stream has no mark
        # between epochs: the first iteration went on through all 100,000 epochs of the job).
        served = pipe.distribute(cluster.address, sharding="off")
        epochs = [sorted(k for element in served for k in element["__keys__"]) for _ in range(2)]
        served.close()
    assert sorted(keys) == sorted([str(i) for i in range(12)] * 2), keys
    assert epochs == [sorted([str(i) for i in range(12)] * 2)] * 2, [len(e) for e in epochs]


def test_parameters_that_disagree_are_refused(stoker_bin, tmp_path):
    spec = write_spec(tmp_path, {"source": {"range": 1000000}})
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        cluster.add_worker("--buffer-bytes", "1048576")
        first = Consumer(stoker_bin, cluster.address, spec, "J", workdir=tmp_path)
        first.wait_for_keys(1)  # the job runs
        r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address, spec,
                            "--job-name", "J", "--sharding", "off"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "job 'J'" in r.stderr and "different sharding" in r.stderr, r.stderr
        other = write_spec(tmp_path, {"source": {"range": 5}}, "other.json")
        r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address, other,
                            "--job-name", "J"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "pipeline spec" in r.stderr, r.stderr
        first.proc.kill()
        first.wait()


# --- epochs ----------------------------------------------------------------------------------------

def test_epochs_through_the_service_equal_the_in_process_epochs(shards, stoker_bin, tmp_path):
    pipe = stoker.Pipeline.from_spec(image_spec(shards))
    local = [[(tuple(b["__keys__"]), b["jpg"].tobytes()) for b in pipe.iterator(epoch=e)]
             for e in (0, 1)]
    assert local[0] != local[1], "epochs differ in-process"
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        cluster.add_worker()
        cluster.add_worker()
        served = pipe.distribute(dispatcher=cluster.address, deterministic=True)
        epochs = [[(tuple(b["__keys__"]), b["jpg"].tobytes()) for b in served] for _ in (0, 1)]
        job = served._consumer.job_id
        served.close()
        assert epochs[0] == local[0]
        assert epochs[1] == local[1]
        # One job carried both epochs.
        assert len(re.findall(r"job \d+ (?:'[^']*' )?created", cluster.log())) == 1, cluster.log()
        assert re.search(rf"job {job} (?:'[^']*' )?created", cluster.log()), cluster.log()
        # set_epoch picks an epoch; a new job starts there.
        served = pipe.distribute(dispatcher=cluster.address, deterministic=True)
        served.set_epoch(1)
        assert [(tuple(b["__keys__"]), b["jpg"].tobytes()) for b in served] == local[1]
        served.close()


# --- coordinated reads for DDP ---------------------------------------------------------------------

DDP_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import torch, torch.distributed as dist
    import stoker, stoker.torch
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    spec, address, out, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    pipe = stoker.Pipeline.from_spec(json.load(open(spec))).distribute(dispatcher=address)
    ds = stoker.torch.IterableDataset(pipe)       # coordinated reads from rank / world size
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    record = {"epochs": []}
    for epoch in range(2):
        ds.set_epoch(epoch)
        batches = []
        for batch in loader:
            field = batch[sys.argv[5]]
            x = field.reshape(field.shape[0], -1)[:, :1].float()
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()                      # all-reduce: every rank must take this step
            opt.step()
            batches.append({"keys": list(batch["__keys__"]), "shape": list(field.shape)})
            if rank == 0 and len(batches) == 3:
                print("stepping", flush=True)
            time.sleep(delay)
        record["epochs"].append(batches)
        print(f"rank {rank} epoch {epoch}: {len(batches)} batches", flush=True)
    dist.barrier()
    json.dump(record, open(out, "w"))
""")


def run_ranks(tmp_path, spec, address, delay, field, on_stepping=None, world=2):
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = python_env()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world))
    procs = []
    for rank in range(world):
        env_r = dict(env, RANK=str(rank))
        procs.append(subprocess.Popen(
            [PYTHON, str(script), spec, address, str(tmp_path / f"rank{rank}.json"), str(delay),
             field], env=env_r, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    if on_stepping is not None:
        assert procs[0].stdout.readline().strip() == "stepping"
        on_stepping()
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * world, [o[1][-3000:] for o in outs]
    return [json.load(open(tmp_path / f"rank{r}.json")) for r in range(world)]


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_ranks_get_equal_disjoint_batches_and_survive_a_killed_worker(stoker_bin, tmp_path):
    n, batch = 4000, 10
    spec = write_spec(tmp_path, {"source": {"range": n}, "ops": [{"op": "batch", "size": batch}]})
    with Cluster(stoker_bin, tmp_path / "cluster", worker_timeout_ms=1500) as cluster:
        cluster.add_worker()
        victim = cluster.add_worker()
        records = run_ranks(tmp_path, spec, cluster.address, 0.004, "value",
                            on_stepping=lambda: victim.kill())
    for epoch in range(2):
        per_rank = [r["epochs"][epoch] for r in records]
        assert len(per_rank[0]) == len(per_rank[1]) > 0, "equal batch counts per epoch"
        keys = [[k for b in batches for k in b["keys"]] for batches in per_rank]
        assert not set(keys[0]) & set(keys[1]), "disjoint"
        union = keys[0] + keys[1]
        assert len(union) == len(set(union)) == n, "the union is the epoch exactly once"


def run_demo(stoker_bin, data, log_path):
    """`stoker demo` (JPEGs of several sizes, converted, then one epoch through an in-process
    service). It hung once in a full ctest run (not reproduced in 50 runs since): if it does again,
    the failure shows its output and, where gdb exists, every thread's stack."""
    with open(log_path, "w") as log:
        demo = subprocess.Popen([stoker_bin, "demo", "--images", "400", "--dir", str(data)],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            assert demo.wait(timeout=120) == 0, open(log_path).read()
        except subprocess.TimeoutExpired:
            stacks = ""
            if shutil.which("gdb"):
                stacks = subprocess.run(["gdb", "-batch", "-p", str(demo.pid), "-ex",
                                         "thread apply all bt"], capture_output=True, text=True,
                                        timeout=60).stdout
            demo.kill()
            demo.wait()
            raise AssertionError(f"stoker demo hung; its output:\n{open(log_path).read()}\n"
                                 f"its threads:\n{stacks}")


def test_ddp_rounds_with_bucket_by_length_share_one_bucket(stoker_bin, tmp_path):
    data = tmp_path / "demo"
    run_demo(stoker_bin, data, tmp_path / "demo.log")
    shards = next(str(p) for p in [data / "shards", data] if (p / "manifest.json").exists())
    boundaries = [112, 128, 144]
    spec = write_spec(tmp_path, {
        "source": {"dataset": shards + "/"},
        "ops": [{"op": "shuffle", "seed": 3}, {"op": "decode_image", "field": "jpg"},
                {"op": "bucket_by_length", "field": "jpg", "boundaries": boundaries,
                 "batch_sizes": [4, 4, 4, 4]}]})
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        cluster.add_worker()
        cluster.add_worker()
        records = run_ranks(tmp_path, spec, cluster.address, 0.0, "jpg")
    bucket = lambda shape: int(np.searchsorted(boundaries, shape[1], side="right"))
    for epoch in range(2):
        a, b = (r["epochs"][epoch] for r in records)
        assert len(a) == len(b) > 0
        assert [bucket(x["shape"]) for x in a] == [bucket(x["shape"]) for x in b]
        assert len({bucket(x["shape"]) for x in a}) > 1, "several buckets were used"


def test_a_rank_that_dies_is_an_error_for_the_others(stoker_bin, tmp_path):
    spec = write_spec(tmp_path, {"source": {"range": 1000000}, "ops": [{"op": "batch",
                                                                          "size": 10}]})
    with Cluster(stoker_bin, tmp_path / "cluster", client_timeout_ms=2000) as cluster:
        cluster.add_worker("--buffer-bytes", "1048576")
        args = ["--job-name", "ranks", "--num-consumers", "2"]
        ranks = [subprocess.Popen([stoker_bin, "consume", "--dispatcher", cluster.address, spec,
                                   *args, "--consumer-index", str(i), "--print-keys"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
        ranks[1].stdout.readline()
        ranks[1].kill()
        ranks[1].communicate()
        t0 = time.monotonic()
        _, err = ranks[0].communicate(timeout=60)
        assert ranks[0].returncode != 0
        assert time.monotonic() - t0 < 15
        assert "consumer 1 of 2" in err and "coordinated job" in err, err


# --- life cycle ------------------------------------------------------------------------------------

def test_abandoned_jobs_are_collected_and_workers_give_memory_back(shards, stoker_bin, tmp_path):
    spec_dict = image_spec(shards)
    spec = write_spec(tmp_path, spec_dict)
    with Cluster(stoker_bin, tmp_path / "cluster", client_timeout_ms=2000) as cluster:
        for _ in range(2):
            cluster.add_worker("--buffer-bytes", str(32 << 20))
        def abandon(count, wave):
            """`count` consumers of 40-epoch jobs take one batch and go: half exit (SIGINT), half
            are killed (-9)."""
            procs = [subprocess.Popen([stoker_bin, "consume", "--dispatcher", cluster.address,
                                       spec, "--epochs", "40", "--print-keys"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                     for _ in range(count)]
            for i, p in enumerate(procs):
                p.stdout.readline()
                if (wave + i) % 2:
                    p.kill()
                else:
                    p.send_signal(signal.SIGINT)
            for p in procs:
                p.wait(timeout=30)

        def wait_until_ended(count):
            deadline = time.monotonic() + 20
            while len(set(re.findall(r"job (\d+) ended", cluster.log()))) < count and \
                    time.monotonic() < deadline:
                time.sleep(0.2)  # polling a log file
            return sorted(set(re.findall(r"job (\d+) ended", cluster.log())), key=int)

        # Warm-up: one whole job and a wave of 5 abandoned ones, as many at once as each measured
        # wave, so that what a worker keeps after its first jobs (code, pools, the high-water mark
        # of malloc's arenas for 5 concurrent jobs) is in the baseline. (A warm-up of 4 left the
        # baseline below what 5 concurrent jobs fragment: under load, 75-79% came back.)
        r = subprocess.run([stoker_bin, "consume", "--dispatcher", cluster.address, spec],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        abandon(5, 0)
        assert len(wait_until_ended(5)) == 5
        time.sleep(1)
        baseline = [rss_bytes(w.pid) for w in cluster.workers]
        # 20 consumers take one batch and go (in waves of 5): 10 exit, 10 are killed.
        peak = list(baseline)
        for wave in range(4):
            abandon(5, wave)
            time.sleep(1)
            peak = [max(a, rss_bytes(w.pid)) for a, w in zip(peak, cluster.workers)]
        assert max(b - a for a, b in zip(baseline, peak)) > 8 << 20, \
            ("the jobs held no buffers", baseline, peak)
        # After the client timeout every job is ended, and the workers' memory is back.
        ended = wait_until_ended(25)
        assert len(ended) == 25, (ended, cluster.log()[-3000:])
        # "Back": within 10% of the baseline, or at least half of what the jobs took returned.
        # malloc keeps fragmented pages after many concurrent reads (read-ahead keeps up to 16 in
        # flight per job), more the more jobs overlapped: under load, waves overlap and 6.7-10 MB
        # stayed of peaks 33-40 MB over the baseline (74-81% returned; malloc_trim(0) from gdb gave
        # none of it back, and 40 jobs in a row grow a worker by 0.06 MB a job). A leak of the
        # jobs' buffers returns nothing (the peak is at least 8 MiB, and 10% of the baseline is
        # ~4.5 MB, so such a leak passes neither bound).
        def back(n, b, p):
            return n <= max(b * 1.1, b + 0.5 * (p - b))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = [rss_bytes(w.pid) for w in cluster.workers]
            if all(back(n, b, p) for n, b, p in zip(now, baseline, peak)):
                break
            time.sleep(0.5)
        assert all(back(n, b, p) for n, b, p in zip(now, baseline, peak)), (baseline, peak, now)


def test_train_tiny_reruns_with_a_fixed_job_name(stoker_bin, make_images_bin, tmp_path):
    with Cluster(stoker_bin, tmp_path / "cluster") as cluster:
        cluster.add_worker()
        env = python_env()
        env.update(STOKER_BIN=stoker_bin, STOKER_MAKE_TEST_IMAGES=make_images_bin)
        for run in range(2):
            r = subprocess.run([PYTHON, os.path.join(SOURCE_DIR, "examples", "train_tiny.py"),
                                "--dispatcher", cluster.address, "--steps", "20", "--log-every",
                                "10", "--per-class", "16"],
                               env=env, capture_output=True, text=True, timeout=240)
            assert r.returncode == 0, r.stderr[-3000:]
            assert "done: 20 steps" in r.stdout, r.stdout


# --- a trainer without storage credentials ---------------------------------------------------------

# (s3_server: conftest.py)

def test_a_trainer_without_credentials_consumes_an_s3_dataset(shards, stoker_bin, s3_server,
                                                               tmp_path):
    with_creds = dict(os.environ, **s3_server)
    subprocess.run(["/usr/bin/aws", "--endpoint-url", s3_server["AWS_ENDPOINT_URL"], "s3", "mb",
                    "s3://train"], env=with_creds, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([stoker_bin, "convert", shards.rstrip("/") + "/../images",
                    "s3://train/shards/"], env=with_creds, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    spec = {"source": {"dataset": "s3://train/shards/"},
            "ops": [{"op": "map_field", "keep": ["cls"]}, {"op": "batch", "size": 8}]}
    local = sorted(k for b in stoker.Pipeline.from_spec(dict(spec, source={"dataset": shards}))
                   for k in b["__keys__"])
    with Cluster(stoker_bin, tmp_path / "cluster", env=with_creds) as cluster:
        cluster.add_worker()
        bare = {k: v for k, v in python_env().items() if not k.startswith("AWS_")}
        bare["HOME"] = str(tmp_path)  # no ~/.aws either
        script = textwrap.dedent(f"""
            import json, stoker
            pipe = stoker.dataset("s3://train/shards/").map_field(keep=["cls"]).batch(8)
            keys = [k for b in pipe.distribute(dispatcher="{cluster.address}") for k in b["__keys__"]]
            print(json.dumps(sorted(keys)))
        """)
        r = subprocess.run([PYTHON, "-c", script], env=bare, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout) == local
        # In-process, the same trainer cannot read the data: the service made the difference.
        r = subprocess.run([PYTHON, "-c", "import json, stoker; list(stoker.Pipeline.from_spec("
                            f"json.loads({json.dumps(spec)!r})))"],
                           env=bare, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0


# --- servers inside Python -------------------------------------------------------------------------

def test_dispatcher_and_workers_started_from_python(tmp_path):
    import stoker.service
    dispatcher = stoker.service.Dispatcher(work_dir=str(tmp_path / "journal"))
    workers = [stoker.service.Worker(dispatcher.address) for _ in range(2)]
    try:
        assert dispatcher.port > 0 and all(w.address.startswith("127.0.0.1:") for w in workers)
        served = stoker.memory_range(1000).batch(10).distribute(dispatcher.address)
        values = sorted(int(v) for b in served for v in b["value"])
        assert values == list(range(1000))
        served.close()
    finally:
        workers[0].stop(drain_timeout=2.0)
        workers[1].stop()
        dispatcher.stop()
