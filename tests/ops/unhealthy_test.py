#!/usr/bin/python3
"""A worker that cannot read the data is marked unhealthy (docs/operations.md), with real processes.

The jobs name their dataset by a relative path (`shards/`), which each worker opens from its own
working directory: the "bad" worker runs where that folder does not exist, as a worker whose data
mount is missing. With --unhealthy-after 2, its second failed task makes it unhealthy: its /healthz
answers 503 with the reason, the dispatcher logs it once and counts it, and a later job runs only
on the healthy worker (the bad one gets no task and no split) and delivers every sample.

Usage: unhealthy_test.py STOKER MAKE_TEST_IMAGES
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from ops_common import fail, http_get, metric, read, wait_for

STOKER, MAKE_IMAGES = sys.argv[1:3]


def main():
    work = tempfile.mkdtemp(prefix="stoker-unhealthy-")
    data, empty = os.path.join(work, "data"), os.path.join(work, "empty")
    os.makedirs(empty)
    procs = []
    env = dict(os.environ)
    env.pop("STOKER_LOG", None)

    def start(name, args, cwd):
        p = subprocess.Popen(args, cwd=cwd, env=env,
                             stdout=open(os.path.join(work, f"{name}.out"), "w"),
                             stderr=open(os.path.join(work, f"{name}.err"), "w"))
        procs.append(p)
        return p

    def start_worker(name, cwd):
        start(name, [STOKER, "worker", "--dispatcher", dispatcher, "--http-port", "0",
                     "--heartbeat-ms", "100", "--unhealthy-after", "2"], cwd)
        m = wait_for(lambda: re.search(r"serving on (\S+), /healthz on port (\d+)",
                                       read(os.path.join(work, f"{name}.out"))), name)
        return m.group(1), int(m.group(2))

    def consume():
        return subprocess.run([STOKER, "consume", "--dispatcher", dispatcher, "spec.json",
                               "--print-keys"], cwd=data, env=env, capture_output=True,
                              text=True, timeout=60)

    try:
        subprocess.run([MAKE_IMAGES, os.path.join(work, "images"), "--classes", "2",
                        "--per-class", "20", "--width", "64", "--height", "48"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([STOKER, "convert", os.path.join(work, "images"),
                        os.path.join(data, "shards")], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        with open(os.path.join(data, "spec.json"), "w") as f:
            json.dump({"source": {"dataset": "shards/"},
                       "ops": [{"op": "decode_image", "field": "jpg"}]}, f)

        start("dispatcher", [STOKER, "dispatcher", "--port", "0", "--http-port", "0"], work)
        m = wait_for(lambda: re.search(r"serving on port (\d+), /healthz on port (\d+)",
                                       read(os.path.join(work, "dispatcher.out"))), "dispatcher")
        dispatcher, dhttp = f"127.0.0.1:{m.group(1)}", int(m.group(2))
        bad_address, bad_http = start_worker("bad", empty)
        if http_get(bad_http, "/healthz") != (200, "ok\n"):
            fail(f"a fresh worker is not healthy: {http_get(bad_http, '/healthz')}")

        # Two jobs fail on the bad worker (the only one): each consumer gets the worker's error.
        for attempt in range(2):
            r = consume()
            if r.returncode == 0:
                fail(f"job {attempt + 1} succeeded on a worker that cannot read the data")
            if bad_address not in r.stderr or "shards" not in r.stderr:
                fail(f"consumer's error does not name the worker and the data: {r.stderr}")
        status, body = wait_for(lambda: (lambda s: s if s[0] == 503 else None)(
            http_get(bad_http, "/healthz")), "the bad worker's /healthz to say 503")
        if not body.startswith("unhealthy: 2 tasks in a row failed") or "shards" not in body:
            fail(f"/healthz body does not give the reason: {body!r}")
        wait_for(lambda: metric(dhttp, "stoker_dispatcher_unhealthy_workers") == 1,
                 "the dispatcher to count the unhealthy worker")
        if metric(bad_http, "stoker_worker_healthy") != 0:
            fail("stoker_worker_healthy is not 0 on the bad worker")
        lines = [l for l in read(os.path.join(work, "dispatcher.err")).splitlines()
                 if "is unhealthy" in l]
        if len(lines) != 1 or bad_address not in lines[0] or "no new tasks" not in lines[0]:
            fail(f"dispatcher's log of the unhealthy worker: {lines}")

        # A healthy worker joins: the next job runs on it alone and delivers every image.
        good_address, good_http = start_worker("good", data)
        wait_for(lambda: metric(dhttp, "stoker_dispatcher_workers") == 2, "2 workers")
        r = consume()
        if r.returncode != 0:
            fail(f"job 3 failed with a healthy worker: {r.stderr}")
        keys = r.stdout.split()
        if len(keys) != 40 or len(set(keys)) != 40:
            fail(f"job 3 delivered {len(keys)} keys ({len(set(keys))} distinct), expected 40")
        if metric(dhttp, f'stoker_dispatcher_splits_leased_total{{worker="{bad_address}"}}'):
            fail("the unhealthy worker was leased splits")
        if metric(bad_http, 'stoker_worker_produced_elements_total{job_id="3"}') is not None:
            fail("the unhealthy worker ran job 3")
        if http_get(good_http, "/healthz")[0] != 200 or http_get(bad_http, "/healthz")[0] != 503:
            fail("health changed")
        print(f"bad worker {bad_address}: {body.strip()}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    print("unhealthy test: OK")


if __name__ == "__main__":
    main()
