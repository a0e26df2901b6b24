#!/usr/bin/python3
"""Exactly-once across hosts (docs/deploy.md): five network namespaces on one bridge
(scripts/netns-cluster) - a dispatcher, the Swift S3 server (scripts/s3-test-server), two workers
and a trainer - run the real binaries. The workers are started without --host and must advertise
their own host's address. A job reads a dataset from S3 (the trainer has no credentials: the data
comes through the workers); mid-epoch, the link of a worker that holds a split is taken down (its
process keeps running, its connections hang, as when a cable is pulled). The trainer must still
receive every key of the dataset exactly once, and the dispatcher's /metrics and status page, read
inside its own namespace, must show the worker lost and its splits leased again to the other one.

Skips (with a message) only where network namespaces cannot be created (not root, no iproute2).

Usage: multihost_test.py STOKER MAKE_TEST_IMAGES SOURCE_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from ops_common import (can_create_namespaces, fail, load_netns_cluster, read,
                        stop_and_keep_logs, wait_for)

STOKER, MAKE_IMAGES, SOURCE_DIR, OUT_DIR = sys.argv[1:5]
S3_SERVER = os.path.join(SOURCE_DIR, "scripts", "s3-test-server")
# The trainer's link is slow, so that the epoch lasts long enough to cut a worker off in its middle.
TRAINER_RATE = "4mbit"
CONSUMER_HTTP_PORT = 9100  # the trainer's namespace has every port free
WORKER_TIMEOUT_MS = 1500


T0 = time.time()


def step(what):
    print(f"[{time.time() - T0:5.1f} s] {what}", flush=True)


def http(cluster, host, port, path):
    """GET of http://127.0.0.1:port/path inside `host`'s namespace: the body ('' on failure)."""
    r = subprocess.run(cluster.argv(host, ["curl", "-s", "--max-time", "2",
                                           f"http://127.0.0.1:{port}{path}"]),
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def metric(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def main():
    why_not = can_create_namespaces()
    if why_not:
        print(f"SKIP: cannot create network namespaces here: {why_not}")
        return
    if shutil.which("swift-proxy-server") is None:
        fail("OpenStack Swift is not installed (scripts/install-deps.sh installs it)")
    netns = load_netns_cluster(SOURCE_DIR)
    os.makedirs(OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="stoker-multihost-")
    procs = []

    def start(cluster, host, name, argv, env=None):
        out = os.path.join(work, f"{name}.out")
        p = subprocess.Popen(cluster.argv(host, argv), stdout=open(out, "w"),
                             stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p, out

    try:
        # 3 classes x 40 JPEGs of 320x240 (about 5 MB): a few seconds over the trainer's link.
        images = os.path.join(work, "images")
        subprocess.run([MAKE_IMAGES, images, "--classes", "3", "--per-class", "40", "--width",
                        "320", "--height", "240"], check=True, stdout=subprocess.DEVNULL)
        shards = os.path.join(work, "shards")
        subprocess.run([STOKER, "convert", images, shards, "--shard-size", "131072"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spec = os.path.join(work, "spec.json")
        with open(spec, "w") as f:
            json.dump({"source": {"dataset": "s3://train/shards/"}}, f)
        local_spec = os.path.join(work, "local.json")
        with open(local_spec, "w") as f:
            json.dump({"source": {"dataset": shards}}, f)
        expected = subprocess.run([STOKER, "run", local_spec, "--print-keys"], check=True,
                                  capture_output=True, text=True).stdout.split()
        if len(expected) != 120 or len(set(expected)) != 120:
            fail(f"the local run read {len(expected)} keys ({len(set(expected))} distinct), "
                 "expected 120")

        step("dataset made")
        hosts = ["dispatcher", "s3", "w1", "w2", ("trainer", TRAINER_RATE)]
        with netns.Cluster(hosts, rate="1gbit", state_dir=os.path.join(work, "netns")) as cluster:
            # The S3 server on its host, listening on that host's address.
            step("hosts up")
            s3_dir = os.path.join(work, "s3")
            subprocess.run(cluster.argv("s3", ["env", "STOKER_S3_BIND=0.0.0.0", S3_SERVER,
                                               "start", s3_dir]),
                           check=True, stdout=subprocess.DEVNULL, timeout=90)
            step("S3 server up")
            env_lines = subprocess.run([S3_SERVER, "env", s3_dir], check=True,
                                       capture_output=True, text=True).stdout
            creds = dict(re.findall(r"export (\w+)=(\S+)", env_lines))
            port = creds["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]
            creds["AWS_ENDPOINT_URL"] = f"http://{cluster.addr('s3')}:{port}"
            with_creds = dict(os.environ, **creds)
            subprocess.run(cluster.argv("w1", ["/usr/bin/aws", "--endpoint-url",
                                               creds["AWS_ENDPOINT_URL"], "s3", "mb",
                                               "s3://train"]),
                           env=with_creds, check=True, stdout=subprocess.DEVNULL)
            step("bucket made")
            subprocess.run(cluster.argv("w1", [STOKER, "convert", images, "s3://train/shards/",
                                               "--shard-size", "131072"]),
                           env=with_creds, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)

            step("S3 server up, dataset uploaded")
            _, dout = start(cluster, "dispatcher", "dispatcher",
                            [STOKER, "dispatcher", "--port", "0", "--http-port", "0",
                             "--worker-timeout-ms", str(WORKER_TIMEOUT_MS),
                             "--work-dir", os.path.join(work, "journal")])
            m = wait_for(lambda: re.search(r"serving on port (\d+), /healthz on port (\d+)",
                                           read(dout)), "the dispatcher")
            dispatcher = f"{cluster.addr('dispatcher')}:{m.group(1)}"
            dispatcher_http = m.group(2)
            advertised = {}
            for w in ("w1", "w2"):
                _, wout = start(cluster, w, w, [STOKER, "worker", "--dispatcher", dispatcher,
                                                "--http-port", "0", "--heartbeat-ms", "200",
                                                "--buffer-bytes", "1M"], env=with_creds)
                advertised[w] = wait_for(lambda: re.search(r"serving on (\S+?):(\d+),",
                                                           read(wout)), w).group(1)
                if advertised[w] != cluster.addr(w):
                    fail(f"worker {w} advertises {advertised[w]}, expected its host's address "
                         f"{cluster.addr(w)}")
            wait_for(lambda: metric(http(cluster, "dispatcher", dispatcher_http, "/metrics"),
                                    "stoker_dispatcher_workers") == 2, "2 workers registered")

            # The trainer: no credentials, only the dispatcher's address.
            bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
            bare["HOME"] = work
            keys_path = os.path.join(work, "keys.txt")
            started = time.time()
            consume = subprocess.Popen(
                cluster.argv("trainer", [STOKER, "consume", "--dispatcher", dispatcher, spec,
                                         "--print-keys", "--http-port", str(CONSUMER_HTTP_PORT)]),
                stdout=open(keys_path, "w"), stderr=open(os.path.join(work, "consume.err"), "w"),
                env=bare)
            procs.append(consume)

            # Mid-epoch, once w1 holds a split and the trainer has some keys: pull w1's cable.
            def w1_holds_a_split():
                page = http(cluster, "dispatcher", dispatcher_http, "/metrics")
                for line in page.splitlines():
                    if line.startswith("stoker_dispatcher_splits_leased_total{worker=\""
                                       + advertised["w1"] + ":"):
                        return float(line.split()[-1]) >= 1
                return False

            def received():
                return metric(http(cluster, "trainer", CONSUMER_HTTP_PORT, "/metrics"),
                              'stoker_client_delivered_elements_total{job_id="1"}') or 0

            wait_for(lambda: w1_holds_a_split() and received() >= 10,
                     "w1 to hold a split while the trainer reads", timeout=30)
            received_before = received()
            if consume.poll() is not None:
                fail("the consumer finished before a worker could be cut off: make the epoch "
                     "longer")
            cluster.set_link("w1", up=False)
            print(f"w1's link down after {time.time() - started:.1f} s, "
                  f"{received_before:.0f} of {len(expected)} keys received")

            try:
                rc = consume.wait(timeout=45)
            except subprocess.TimeoutExpired:
                fail(f"the consumer did not finish within 45 s of w1's loss "
                     f"({received():.0f} keys): "
                     f"{read(os.path.join(work, 'consume.err'))[-2000:]}")
            if rc != 0:
                fail(f"consume exited {rc}: {read(os.path.join(work, 'consume.err'))[-2000:]}")
            keys = read(keys_path).split()
            duplicates = len(keys) - len(set(keys))
            missing = set(expected) - set(keys)
            extra = set(keys) - set(expected)
            if duplicates or missing or extra:
                fail(f"the trainer got {len(keys)} keys: {duplicates} duplicated, "
                     f"{len(missing)} missing (e.g. {sorted(missing)[:3]}), {len(extra)} unknown")
            # The trainer's link is shaped: the data cannot have arrived faster than it carries.
            m = re.search(r"\(\d+ samples, ([\d.]+) MB\) of job \d+ in ([\d.]+) s",
                          read(os.path.join(work, "consume.err")))
            if not m:
                fail(f"consume printed no summary: {read(os.path.join(work, 'consume.err'))}")
            link_mb_s = netns.parse_rate(TRAINER_RATE) / 8 / 1e6
            if float(m.group(2)) < 0.8 * float(m.group(1)) / link_mb_s:
                fail(f"{m.group(1)} MB arrived in {m.group(2)} s, faster than the trainer's "
                     f"{TRAINER_RATE} link: the shaping is not in effect")
            print(f"the trainer got all {len(keys)} keys exactly once in "
                  f"{time.time() - started:.1f} s")

            # The dispatcher's view, from its own namespace: w1 lost, its splits leased again.
            page = wait_for(lambda: (lambda p: p if metric(p, "stoker_dispatcher_workers") == 1
                                     else None)(http(cluster, "dispatcher", dispatcher_http,
                                                     "/metrics")),
                            "the dispatcher to count 1 worker")
            again = {}
            for line in page.splitlines():
                m = re.match(r'stoker_dispatcher_splits_leased_again_total\{worker="([^"]+)"\} '
                             r"(\S+)", line)
                if m:
                    again[m.group(1).rsplit(":", 1)[0]] = float(m.group(2))
            if again.get(advertised["w2"], 0) < 1:
                fail(f"no split leased again to w2 ({advertised['w2']}): {again}")
            status = http(cluster, "dispatcher", dispatcher_http, "/")
            with open(os.path.join(OUT_DIR, "status.html"), "w") as f:
                f.write(status)
            with open(os.path.join(OUT_DIR, "metrics.txt"), "w") as f:
                f.write(page)
            if advertised["w2"] + ":" not in status:
                fail(f"the status page does not list w2 at {advertised['w2']}")
            lost = re.search(r"missed its heartbeats", status) or re.search(r"\blost\b", status)
            if not lost or advertised["w1"] + ":" not in status:
                fail("the status page shows no event for w1's loss "
                     f"({advertised['w1']}); see {OUT_DIR}/status.html")
            print(f"dispatcher: splits leased again {again}; status page lists w2 and w1's loss")
            cluster.set_link("w1", up=True)
            subprocess.run([S3_SERVER, "stop", s3_dir], stdout=subprocess.DEVNULL, timeout=60)
    finally:
        stop_and_keep_logs(procs, work, OUT_DIR)
    print("multihost test: OK")


if __name__ == "__main__":
    main()
