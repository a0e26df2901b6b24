#!/usr/bin/python3
"""Life cycles of jobs, consumers and servers, seen from outside with real processes
(docs/operations.md, "Job life cycle" and "Stopping"; docs/protocol.md, "Connecting").

1. Nothing listening at the dispatcher's address: `stoker consume` and Python's distribute fail
   with the message naming the address and the refusal, after at most 1 s of their own waiting
   (the CLI's wall time minus that of a run failing before it connects; Python timed around the
   call). With STOKER_WAIT_FOR_DISPATCHER a consumer started first waits and reads its job.
2. Jobs end as soon as their last consumer leaves, well inside the client timeout: at the end of
   `stoker consume --max-elements`, on its Ctrl-C, on Python's close() and on a Python script's
   plain exit. Unnamed jobs carry `<user>@<host>:<program>` (the CLI's `stoker consume`, the
   script's file name, or the display_name the Python side passes) in /metrics and the page.
3. A consumer killed (kill -9) after writing its checkpoint: its job stays running, and the status
   page and /metrics say it waits for that consumer's timeout; it ends at that timeout, not a
   timeout later. The resumed consumer reads the rest.
4. A worker stopped (SIGTERM) together with its dispatcher drains and exits in <= 2 s, idle or
   holding elements nobody reads.

Usage: lifecycle_test.py STOKER [PYTHONPATH]
"""
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

from ops_common import fail, http_get, metric, read, wait_for

STOKER = sys.argv[1]
PYTHONPATH = sys.argv[2] if len(sys.argv) > 2 else ""
PYTHON = "/usr/bin/python3"
CLIENT_TIMEOUT_S = 8  # the dispatcher's: "at once" must be well inside it
USER_HOST = f"{pwd.getpwuid(os.geteuid()).pw_name}@{socket.gethostname()}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(argv, env=None, timeout=60):
    start = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    return time.monotonic() - start, r


class Servers:
    """Processes started by the test, each with its output in a file; all killed at the end."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, name, argv, env=None, stdout=None, stdin=None):
        out = os.path.join(self.work, f"{name}.out")
        p = subprocess.Popen(argv, stdout=stdout or open(out, "w"), stdin=stdin,
                             stderr=open(os.path.join(self.work, f"{name}.err"), "w"), env=env,
                             text=True)
        self.procs.append(p)
        return p

    def dispatcher(self, name, *flags, port=0):
        p = self.start(name, [STOKER, "dispatcher", "--port", str(port), "--http-port", "0",
                              *flags])
        m = wait_for(lambda: re.search(r"serving on port (\d+), /healthz on port (\d+)",
                                       read(os.path.join(self.work, f"{name}.out"))),
                     f"{name} started", timeout=60)
        return p, f"127.0.0.1:{m.group(1)}", int(m.group(2))

    def worker(self, name, dispatcher, *flags):
        p = self.start(name, [STOKER, "worker", "--dispatcher", dispatcher, "--http-port", "0",
                              "--heartbeat-ms", "200", *flags])
        wait_for(lambda: "registered as worker" in read(os.path.join(self.work, f"{name}.err")),
                 f"{name} registered", timeout=60)
        return p

    def err(self, name):
        return read(os.path.join(self.work, f"{name}.err"))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()


def python_env():
    return {**os.environ, "PYTHONPATH": PYTHONPATH}


def refusal(work, spec):
    port = free_port()  # closed again: nothing listens there
    address = f"127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "STOKER_WAIT_FOR_DISPATCHER"}
    # The CLI: its wall time, against a run that fails before connecting (no port in the
    # address), so that the process's own start (slow on a loaded machine) is not counted.
    refused, baseline = [], []
    for _ in range(3):
        t, r = timed([STOKER, "consume", "--dispatcher", "127.0.0.1", spec], env=env)
        if r.returncode == 0 or "no port" not in r.stderr:
            fail(f"consume --dispatcher 127.0.0.1: rc {r.returncode}: {r.stderr}")
        baseline.append(t)
        t, r = timed([STOKER, "consume", "--dispatcher", address, spec], env=env)
        refused.append(t)
        want = f"cannot reach the dispatcher at {address} (is it running, and is the address right?)"
        if r.returncode == 0 or want not in r.stderr or "onnection refused" not in r.stderr:
            fail(f"consume of a closed port: rc {r.returncode}, expected {want!r} and the "
                 f"refusal: {r.stderr}")
    waited = min(refused) - min(baseline)
    print(f"refused: consume took {min(refused):.2f} s (runs {refused}), a run failing before "
          f"connecting {min(baseline):.2f} s: {waited:.2f} s of waiting")
    if waited > 1.0:
        fail(f"a refused connection took {waited:.2f} s of the CLI's waiting (> 1 s)")
    if PYTHONPATH:
        code = textwrap.dedent(f"""
            import time, stoker
            pipe = stoker.memory_range(10)
            start = time.monotonic()
            try:
                next(iter(pipe.distribute(dispatcher="{address}")))
                print("no error")
            except stoker.StokerError as e:
                print(f"{{time.monotonic() - start:.3f}} {{e}}")
        """)
        # The least of 3 tries, as for the CLI: one try can be stalled by a loaded machine.
        tries = []
        for _ in range(3):
            r = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60,
                               env={**python_env(), **env})
            m = re.match(r"([0-9.]+) (.*)", r.stdout, re.S)
            if r.returncode != 0 or not m:
                fail(f"python distribute of a closed port: rc {r.returncode}: "
                     f"{r.stdout}{r.stderr}")
            tries.append((float(m.group(1)), m.group(2)))
        seconds, message = min(tries)
        print(f"refused: python distribute failed after {seconds:.3f} s (tries "
              f"{[round(t, 3) for t, _ in tries]})")
        if seconds > 1.0 or want not in message or "onnection refused" not in message:
            fail(f"python distribute of a closed port: after {seconds:.3f} s: {message}")
    # A consumer told to wait for its dispatcher reads its job once one comes up on that port.
    servers = Servers(work)
    try:
        early = servers.start("early", [STOKER, "consume", "--dispatcher", address, spec,
                                        "--print-keys"],
                              env={**env, "STOKER_WAIT_FOR_DISPATCHER": "60"})
        time.sleep(1.5)
        if early.poll() is not None:
            fail(f"a consumer with STOKER_WAIT_FOR_DISPATCHER=60 gave up: {servers.err('early')}")
        _, dispatcher, _ = servers.dispatcher("late-dispatcher", port=port)
        servers.worker("late-worker", dispatcher)
        if early.wait(timeout=60) != 0:
            fail(f"the waiting consumer failed: {servers.err('early')}")
        keys = read(os.path.join(work, "early.out")).split()
        if sorted(keys, key=int) != [str(i) for i in range(1000)]:
            fail(f"the waiting consumer read {len(keys)} keys")
    finally:
        servers.stop()
    print("refused: a consumer with STOKER_WAIT_FOR_DISPATCHER read its job once it came up")


def job_ends(servers, http, dispatcher_err, job_id, what, since):
    """Waits until job `job_id` ended because its last consumer left; returns how long after
    `since` it was seen ended (the consumer's exit)."""
    line = f"dispatcher: job {job_id} ended: its last consumer left"
    wait_for(lambda: line in servers.err(dispatcher_err), f"{what}: '{line}'",
             timeout=CLIENT_TIMEOUT_S * 3)
    took = time.monotonic() - since
    if took > CLIENT_TIMEOUT_S / 2:
        fail(f"{what}: job {job_id} ended {took:.1f} s after its consumer left (client timeout "
             f"{CLIENT_TIMEOUT_S} s): not at once")
    if metric(http, 'stoker_dispatcher_jobs{state="running"}') != 0:
        fail(f"{what}: a job still runs: {http_get(http, '/metrics')[1]}")
    return took


def job_info(http, job_id):
    """The labels of job `job_id`'s stoker_job_info series, as a dict (None if absent)."""
    for line in http_get(http, "/metrics")[1].splitlines():
        m = re.match(r'stoker_job_info\{(.*)\} 1$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
            if labels.get("job_id") == str(job_id):
                return labels
    return None


def consumers_leave(work, servers, dispatcher, http, spec):
    jobs = 0
    # (a) stoker consume stopping at --max-elements: a normal exit.
    jobs += 1
    p = servers.start("max-elements", [STOKER, "consume", "--dispatcher", dispatcher, spec,
                                       "--max-elements", "5", "--step-ms", "400"])
    info = wait_for(lambda: job_info(http, jobs), "job 1 in /metrics")
    want = {"job_id": "1", "job_name": f"{USER_HOST}:stoker consume",
            "display_name": f"{USER_HOST}:stoker consume", "dataset": "range 100000000"}
    if info != want:
        fail(f"job 1's stoker_job_info labels {info}, expected {want}")
    if p.wait(timeout=60) != 0:
        fail(f"consume --max-elements: {servers.err('max-elements')}")
    took = job_ends(servers, http, "dispatcher", jobs, "consume --max-elements", time.monotonic())
    print(f"leave: consume --max-elements 5: its job ended {took:.2f} s after it exited")

    # (b) Ctrl-C of stoker consume while it reads.
    jobs += 1
    p = servers.start("ctrl-c", [STOKER, "consume", "--dispatcher", dispatcher, spec,
                                 "--step-ms", "50"])
    wait_for(lambda: (metric(http, f'stoker_job_positions_delivered{{job_id="{jobs}",job_name='
                                   f'"{USER_HOST}:stoker consume"}}') or 0) > 0,
             "job 2 delivering", timeout=60)
    p.send_signal(signal.SIGINT)
    if p.wait(timeout=30) != 130:
        fail(f"consume on Ctrl-C: rc {p.returncode}: {servers.err('ctrl-c')}")
    took = job_ends(servers, http, "dispatcher", jobs, "consume Ctrl-C", time.monotonic())
    print(f"leave: consume Ctrl-C: its job ended {took:.2f} s after it exited")

    if not PYTHONPATH:
        print("leave: Python not built; its cases skipped")
        return jobs
    # (c) Python: close(), then (d) a script that simply ends; (e) the display_name and
    # open_ended keys the Python package passes to the native consumer.
    script = os.path.join(work, "train_lifecycle.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(f"""
            import sys, time, stoker
            served = stoker.memory_range(100000000).batch(1000).distribute(
                dispatcher="{dispatcher}")
            it = iter(served)
            for _ in range(3):
                next(it)
            print("read", flush=True)
            sys.stdin.readline()  # the test has seen the job
            if sys.argv[1] == "close":
                served.close()
                print("closed", flush=True)
                time.sleep(30)  # the job must end while this process still lives
            # "exit": the interpreter ends without close()
        """))
    for how in ("close", "exit"):
        jobs += 1
        p = servers.start(f"python-{how}", [PYTHON, script, how], env=python_env(),
                          stdout=subprocess.PIPE, stdin=subprocess.PIPE)
        if p.stdout.readline().strip() != "read":
            fail(f"python script: {servers.err(f'python-{how}')}")
        info = wait_for(lambda: job_info(http, jobs), f"job {jobs} in /metrics", timeout=60)
        name = f"{USER_HOST}:train_lifecycle.py"
        # (job_name: the name Python draws for the run's one job, or the display name)
        if info.get("display_name") != name or info.get("job_name") not in (name, None) and \
                not info.get("job_name", "").startswith("py-"):
            fail(f"the Python job's labels {info}, expected the script's name {name}")
        p.stdin.write("go\n")
        p.stdin.flush()
        if how == "close":
            for line in p.stdout:
                if line.strip() == "closed":
                    break
            since = time.monotonic()
        else:
            p.stdout.read()
            if p.wait(timeout=60) != 0:
                fail(f"python script: {servers.err('python-exit')}")
            since = time.monotonic()
        took = job_ends(servers, http, "dispatcher", jobs, f"python {how}", since)
        if how == "close" and p.poll() is not None:
            fail(f"the script exited before its job ended: {servers.err('python-close')}")
        p.kill()
        p.wait()
        print(f"leave: python {how}: its job ended {took:.2f} s after")
    jobs += 1
    code = textwrap.dedent(f"""
        import json, time, stoker
        from stoker import _stoker
        c = _stoker.ServiceConsumer({{
            "dispatcher": "{dispatcher}", "job_name": "", "spec_json": json.dumps(
                {{"source": {{"range": 1000}}, "ops": [{{"op": "batch", "size": 10}}]}}),
            "sharding": "dynamic", "compression": "none", "num_epochs": 100000, "first_epoch": 0,
            "num_consumers": 0, "consumer_index": 0, "partial_round": "drop",
            "deterministic": False, "no_worker_timeout": 0.0, "display_name": "ann@gpu-7:ddp.py",
            "open_ended": True}})
        for _ in range(200):
            if c.next() is None:
                c.advance_epoch()
        print("read", flush=True)
        time.sleep(60)
    """)
    p = servers.start("python-display-name", [PYTHON, "-c", code], env=python_env())
    info = wait_for(lambda: job_info(http, jobs), f"job {jobs} in /metrics", timeout=60)
    if info.get("job_name") != "ann@gpu-7:ddp.py":
        fail(f"display_name passed by Python: labels {info}")
    metrics = http_get(http, "/metrics")[1]
    if f'stoker_job_positions{{job_id="{jobs}"' in metrics or \
            f'stoker_job_epochs{{job_id="{jobs}"' in metrics:
        fail(f"an open-ended job has a planned total in /metrics: {metrics}")
    page = http_get(http, "/")[1]
    row = re.search(rf"<tr><td>{jobs}</td>(.*?)</tr>", page)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0)) if row else []
    # id, name, created by, age, dataset, state, consumers, epochs done, positions delivered, ...
    if len(cells) < 9 or cells[1] != "ann@gpu-7:ddp.py" or "/" in cells[7] or "/" in cells[8]:
        fail(f"the open-ended job's row: {cells}: expected its name and no planned totals")
    p.kill()
    p.wait()
    print("names: CLI, script and Python's display_name in stoker_job_info; open-ended: no totals")
    return jobs


def killed_consumer(work, servers, dispatcher, http, spec, jobs):
    checkpoint = os.path.join(work, "ck.token")
    jobs += 1
    p = servers.start("killed", [STOKER, "consume", "--dispatcher", dispatcher, spec,
                                 "--checkpoint", checkpoint, "--checkpoint-every", "3",
                                 "--step-ms", "100", "--print-keys"])
    wait_for(lambda: os.path.exists(checkpoint), "the consumer's checkpoint", timeout=60)
    time.sleep(0.3)
    p.kill()
    p.wait()
    killed = time.monotonic()
    # While its timeout runs: running, and the page says why.
    def row():  # job `jobs`'s row of the page
        m = re.search(rf"<tr><td>{jobs}</td>.*?</tr>", http_get(http, "/")[1])
        return m.group(0) if m else ""

    m = wait_for(lambda: re.search(
        r"running</span>: <span class=\"reason\">(no consumer is reading: waiting for consumer "
        r"(\d+)&#39;s timeout \((\d+) s left\))</span>", row()),
        "the page's reason for the killed consumer's job", timeout=CLIENT_TIMEOUT_S)
    reason, client, left = m.group(1), m.group(2), int(m.group(3))
    if not 0 < left <= CLIENT_TIMEOUT_S:
        fail(f"reason {reason!r}: {left} s left of a {CLIENT_TIMEOUT_S}-s timeout")
    silent = metric(http, f'stoker_job_silent_clients{{job_id="{jobs}",job_name="{USER_HOST}:'
                          'stoker consume"}')
    if silent != 1:
        fail(f"stoker_job_silent_clients of job {jobs}: {silent}")
    print(f"killed: the page says '{reason.replace('&#39;', chr(39))}'")
    # It ends at that consumer's timeout, not a client timeout later.
    line = (f"dispatcher: job {jobs} ended: its last consumer (client {client}) missed its "
            f"heartbeats for {CLIENT_TIMEOUT_S} s")
    wait_for(lambda: line in servers.err("dispatcher"), f"'{line}'",
             timeout=CLIENT_TIMEOUT_S * 3)
    took = time.monotonic() - killed
    if took > CLIENT_TIMEOUT_S + 3:
        fail(f"the killed consumer's job ended {took:.1f} s after the kill (timeout "
             f"{CLIENT_TIMEOUT_S} s)")
    print(f"killed: its job ended {took:.1f} s after the kill (client timeout {CLIENT_TIMEOUT_S} s)")
    # The resumed consumer reads the rest of the epoch and ends its job as it leaves.
    jobs += 1
    t, r = timed([STOKER, "consume", "--dispatcher", dispatcher, spec, "--checkpoint",
                  checkpoint, "--max-elements", "3"], timeout=120)
    if r.returncode != 0 or "resuming from checkpoint" not in r.stderr:
        fail(f"resuming: rc {r.returncode}: {r.stderr}")
    job_ends(servers, http, "dispatcher", jobs, "the resumed consumer", time.monotonic())
    return jobs


def drains(work, servers, spec):
    # Idle: a worker with no job, stopped with its dispatcher. Busy: its buffers hold elements for
    # a consumer that stopped reading. A case over the bound is measured once more (a fresh
    # dispatcher and worker) before it fails: one run can be stalled by a loaded machine, while a
    # worker that really waits for its dead dispatcher (10 s) fails both.
    for case in ("idle", "busy"):
        for attempt in (1, 2):
            took, err = drain_once(servers, spec, f"{case}-{attempt}", busy=case == "busy")
            print(f"drain: {case} worker stopped with its dispatcher exited in {took:.2f} s "
                  f"(attempt {attempt})")
            if took <= 2.0:
                break
            if attempt == 2:
                fail(f"the {case} worker took {took:.2f} s to drain and exit (> 2 s), twice: {err}")


def drain_once(servers, spec, name, busy):
    """Seconds from SIGTERM to a worker stopped together with its dispatcher, and its stderr."""
    d, dispatcher, http = servers.dispatcher(f"drain-dispatcher-{name}")
    w = servers.worker(f"drain-worker-{name}", dispatcher, "--buffer-bytes", "64K")
    consumer = None
    if busy:
        consumer = servers.start(f"drain-consumer-{name}", [STOKER, "consume", "--dispatcher",
                                                            dispatcher, spec])
        wait_for(lambda: (metric(http, 'stoker_job_splits{job_id="1",job_name="'
                                       f'{USER_HOST}:stoker consume",state="done"}}') or 0) >= 1,
                 "a split delivered", timeout=60)
        consumer.send_signal(signal.SIGSTOP)
        time.sleep(1)  # the worker fills its buffer
    start = time.monotonic()
    d.send_signal(signal.SIGTERM)
    w.send_signal(signal.SIGTERM)
    rc = w.wait(timeout=30)
    took = time.monotonic() - start
    d.wait(timeout=30)
    if consumer is not None:
        consumer.send_signal(signal.SIGCONT)
        consumer.kill()
        consumer.wait()
    err = servers.err(f"drain-worker-{name}")
    if rc != 0:
        fail(f"the {name} worker exited with {rc}: {err}")
    return took, err


def main():
    work = tempfile.mkdtemp(prefix="stoker-lifecycle-")
    spec = os.path.join(work, "spec.json")
    with open(spec, "w") as f:
        json.dump({"source": {"range": 1000}, "ops": [{"op": "batch", "size": 10}]}, f)
    big = os.path.join(work, "big.json")
    with open(big, "w") as f:
        json.dump({"source": {"range": 100000000}, "ops": [{"op": "batch", "size": 1000}]}, f)
    servers = Servers(work)
    try:
        refusal(work, spec)
        _, dispatcher, http = servers.dispatcher(
            "dispatcher", "--client-timeout-ms", str(CLIENT_TIMEOUT_S * 1000))
        for i in range(2):
            servers.worker(f"worker{i}", dispatcher, "--buffer-bytes", "1M")
        jobs = consumers_leave(work, servers, dispatcher, http, big)
        killed_consumer(work, servers, dispatcher, http, big, jobs)
        drains(work, servers, big)
    finally:
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("lifecycle test: OK")


if __name__ == "__main__":
    main()
