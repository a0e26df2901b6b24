#!/usr/bin/python3
"""The service's events in its logs at the default level, one line each (docs/operations.md), with
real processes: a dispatcher logging JSON (--log-format json), two workers, consumers.

Events provoked: a job created and finished; a worker SIGKILLed while it produces a split (lost,
the split leased again to the other worker); a job whose only consumer leaves early (collected); a
worker stopped with SIGTERM (left). Every dispatcher line must be a JSON object. Also checks that
--help of every service command names STOKER_LOG and --log-format.

Usage: logs_test.py STOKER OUT_DIR
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from ops_common import fail, http_get, metric, read, wait_for

STOKER, OUT_DIR = sys.argv[1:3]


def main():
    for command in ("dispatcher", "worker", "consume"):
        help_text = subprocess.run([STOKER, command, "--help"], capture_output=True,
                                   text=True).stdout
        if "STOKER_LOG" not in help_text or "--log-format" not in help_text:
            fail(f"stoker {command} --help does not name STOKER_LOG and --log-format:\n{help_text}")

    os.makedirs(OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="stoker-logs-")
    procs = []
    env = dict(os.environ)
    env.pop("STOKER_LOG", None)  # the default level

    def start(name, args):
        p = subprocess.Popen(args, stdout=open(os.path.join(work, f"{name}.out"), "w"),
                             stderr=open(os.path.join(work, f"{name}.err"), "w"), env=env)
        procs.append(p)
        return p

    try:
        start("dispatcher", [STOKER, "dispatcher", "--port", "0", "--http-port", "0",
                             "--worker-timeout-ms", "1000", "--log-format", "json"])
        m = wait_for(lambda: re.search(r"serving on port (\d+), /healthz on port (\d+)",
                                       read(os.path.join(work, "dispatcher.out"))), "dispatcher")
        dispatcher, http = f"127.0.0.1:{m.group(1)}", int(m.group(2))
        workers = [start(f"worker{i}", [STOKER, "worker", "--dispatcher", dispatcher,
                                        "--heartbeat-ms", "100", "--buffer-bytes", "64K"])
                   for i in range(2)]
        wait_for(lambda: metric(http, "stoker_dispatcher_workers") == 2, "2 workers registered")

        # Job 1: once it runs, the consumer is stopped (SIGSTOP), so no split is acknowledged any
        # more and the workers, their small buffers full, hold splits; one holding a split is killed, and the
        # consumer resumed. The job cannot finish before the dispatcher leases that split again.
        samples = 1000000
        spec = os.path.join(work, "spec.json")
        with open(spec, "w") as f:
            json.dump({"source": {"range": samples}, "ops": [{"op": "batch", "size": 1000}]}, f)
        consumer = start("consume1", [STOKER, "consume", "--dispatcher", dispatcher, spec,
                                      "--print-keys", "--display-name", "logs-job1"])
        wait_for(lambda: (metric(http, 'stoker_job_splits{job_id="1",job_name="logs-job1",'
                                       'state="done"}') or 0) >= 1,
                 "a split of job 1 delivered")
        consumer.send_signal(signal.SIGSTOP)
        # The worker to kill is one the status page shows holding a split (under load a worker
        # may hold none yet when the consumer stops).
        ids = [int(wait_for(lambda: re.search(r"registered as worker (\d+)",
                                              read(os.path.join(work, f"worker{i}.err")) +
                                              read(os.path.join(work, f"worker{i}.out"))),
                            f"worker {i}'s id").group(1)) for i in range(2)]

        def holding():
            table = re.search(r'<table id="workers">(.*?)</table>', http_get(http, "/")[1], re.S)
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1) if table else "", re.S):
                cells = re.findall(r"<td>(.*?)</td>", row, re.S)
                if cells and int(cells[0]) in ids and int(cells[4]) > 0:  # splits leased
                    return ids.index(int(cells[0])) + 1  # 1 + the index, so that 0 is "none"
            return None
        victim = wait_for(holding, "a worker holding a split of job 1") - 1
        survivor = 1 - victim
        workers[victim].kill()
        workers[victim].wait()
        wait_for(lambda: metric(http, "stoker_dispatcher_workers") == 1, "the lost worker removed")
        consumer.send_signal(signal.SIGCONT)
        if consumer.wait(timeout=60) != 0:
            fail(f"consume 1 failed: {read(os.path.join(work, 'consume1.err'))}")
        keys = read(os.path.join(work, "consume1.out")).split()
        if len(keys) != samples or len(set(keys)) != samples:
            fail(f"consume 1 got {len(keys)} keys ({len(set(keys))} distinct), expected {samples}")

        # Job 2: its only consumer stops after 3 elements and leaves: the job is collected.
        if subprocess.run([STOKER, "consume", "--dispatcher", dispatcher, spec, "--max-elements",
                           "3"], capture_output=True, env=env, timeout=60).returncode != 0:
            fail("consume 2 failed")
        # The other worker stops gracefully: it leaves.
        workers[survivor].send_signal(signal.SIGTERM)
        if workers[survivor].wait(timeout=30) != 0:
            fail("worker 1 did not stop cleanly on SIGTERM")
        wait_for(lambda: "left" in read(os.path.join(work, "dispatcher.err")), "'left' logged")

        lines = read(os.path.join(work, "dispatcher.err")).splitlines()
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                fail(f"dispatcher line is not JSON: {line!r}")
            if not {"time", "level", "thread", "msg"} <= record.keys():
                fail(f"dispatcher line lacks a field: {line!r}")
            records.append(record)
        messages = [r["msg"] for r in records]

        def once(pattern, what):
            found = [m for m in messages if re.search(pattern, m)]
            if len(found) != 1:
                fail(f"{what}: {len(found)} lines match /{pattern}/ in:\n" + "\n".join(messages))
            return found[0]

        once(r"^dispatcher: job 1 created", "job 1 created")
        once(r"^dispatcher: job 1 finished: 1 epoch\(s\) of 1000000 samples", "job 1 finished")
        once(r"^dispatcher: job 2 created", "job 2 created")
        once(r"^dispatcher: job 2 ended: its last consumer left", "job 2 collected")
        if len([m for m in messages if re.search(r"^dispatcher: worker \d+ joined at ", m)]) != 2:
            fail("expected 2 'worker joined' lines:\n" + "\n".join(messages))
        lost = once(r"^dispatcher: worker \d+ \(.*\) missed its heartbeats", "worker lost")
        released = [m for m in messages if re.search(r"^dispatcher: job 1 split \d+ .* leased again, "
                                                     r"to worker \d+", m)]
        # A split of the lost worker is leased again unless the consumer already held all of it
        # (it then acknowledges the split after SIGCONT, before the survivor, its buffer full,
        # asks for work): the log must show one line per lease again that /metrics counts.
        leased_again = sum(float(line.split()[-1]) for line in http_get(http, "/metrics")[1]
                           .splitlines()
                           if line.startswith("stoker_dispatcher_splits_leased_again_total{"))
        if len(released) != leased_again:
            fail(f"{len(released)} 'leased again' lines, {leased_again:.0f} counted in /metrics:\n"
                 + "\n".join(messages))
        once(r"^dispatcher: worker \d+ \(.*\) left$", "worker left")
        warn = [r for r in records if r["msg"] == lost]
        if warn[0]["level"] != "warning":
            fail(f"a lost worker is a warning: {warn[0]}")
        if not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", records[0]["time"]):
            fail(f"time is not ISO 8601 UTC: {records[0]['time']}")
        # Workers log in text at the default level: their registration.
        if not re.search(r"\] worker 127\.0\.0\.1:\d+: registered as worker \d+",
                         read(os.path.join(work, "worker1.err"))):
            fail(f"worker 1's log: {read(os.path.join(work, 'worker1.err'))}")
        shutil.copy(os.path.join(work, "dispatcher.err"), os.path.join(OUT_DIR, "dispatcher.log"))
        print(f"{len(records)} dispatcher lines, {len(released)} splits leased again")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    print("logs test: OK")


if __name__ == "__main__":
    main()
