#!/usr/bin/python3
"""/metrics of every service process, scraped by Debian's real Prometheus (docs/operations.md).

Starts a dispatcher, 2 workers and a consumer (stoker consume --http-port) on loopback, with the
dataset served over HTTP by nginx (scripts/http-test-server), and a Prometheus on a free port whose
scrape configuration names all four. Runs one job, then reads the values back through Prometheus's
HTTP query API and compares them with what the consumer says it received, and the job's series
labelled with its name (`<user>@<host>:stoker consume`) and dataset. Every /metrics page also
passes `promtool check metrics`.

Usage: prometheus_test.py STOKER MAKE_TEST_IMAGES SOURCE_DIR OUT_DIR
"""
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from ops_common import fail

STOKER, MAKE_IMAGES, SOURCE_DIR, OUT_DIR = sys.argv[1:5]
HTTP_SERVER = os.path.join(SOURCE_DIR, "scripts", "http-test-server")
SCRAPE_INTERVAL_S = 0.25


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for_line(path, pattern, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            m = re.search(pattern, open(path).read())
            if m:
                return m
        time.sleep(0.05)
    fail(f"{what} did not start: {open(path).read() if os.path.exists(path) else '(no output)'}")


class Cluster:
    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, name, args):
        out = open(os.path.join(self.work, f"{name}.out"), "w")
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p, os.path.join(self.work, f"{name}.out")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def query(prom_port, expr):
    """The value of an instant query (a scalar or the single series' value), or None if empty."""
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    reply = json.loads(get(url))
    if reply.get("status") != "success":
        fail(f"query {expr}: {reply}")
    result = reply["data"]["result"]
    if reply["data"]["resultType"] == "scalar":
        return float(result[1])
    if not result:
        return None
    if len(result) != 1:
        fail(f"query {expr} returned {len(result)} series: {result}")
    return float(result[0]["value"][1])


def series_labels(prom_port, expr):
    """The label sets of an instant query's series."""
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    reply = json.loads(get(url))
    if reply.get("status") != "success":
        fail(f"query {expr}: {reply}")
    return [r["metric"] for r in reply["data"]["result"]]


def wait_for_value(prom_port, expr, expected, timeout=15):
    """Polls until the query gives `expected` (scrapes lag the processes a little)."""
    deadline = time.time() + timeout
    value = None
    while time.time() < deadline:
        value = query(prom_port, expr)
        if value is not None and abs(value - expected) < 1e-6:
            return value
        time.sleep(SCRAPE_INTERVAL_S)
    fail(f"{expr} = {value}, expected {expected}")


def promtool_check(text, what):
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"promtool check metrics on {what}'s /metrics: {r.stdout}{r.stderr}")


def main():
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            fail(f"{tool} is not installed (scripts/install-deps.sh installs Debian's prometheus)")
    os.makedirs(OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="stoker-prometheus-")
    cluster = Cluster(work)
    http_dir = os.path.join(work, "nginx")
    nginx_started = False
    try:
        # The dataset: 3 classes x 40 JPEGs as shards, served over HTTP so that the workers' object
        # store client (stoker_store_*) has requests to count.
        data = os.path.join(work, "www")
        subprocess.run([MAKE_IMAGES, os.path.join(work, "images"), "--classes", "3", "--per-class",
                        "40", "--width", "96", "--height", "72"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([STOKER, "convert", os.path.join(work, "images"),
                        os.path.join(data, "shards"), "--shard-size", "65536"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([HTTP_SERVER, "start", http_dir, data], check=True, stdout=subprocess.DEVNULL)
        nginx_started = True
        base = subprocess.run([HTTP_SERVER, "url", http_dir], check=True, capture_output=True,
                              text=True).stdout.strip()

        _, dout = cluster.start("dispatcher", [STOKER, "dispatcher", "--port", "0", "--http-port",
                                               "0", "--work-dir", os.path.join(work, "journal")])
        m = wait_for_line(dout, r"serving on port (\d+), /healthz on port (\d+)", "dispatcher")
        dispatcher, dispatcher_http = f"127.0.0.1:{m.group(1)}", int(m.group(2))
        worker_http = []
        for i in range(2):
            _, wout = cluster.start(f"worker{i}", [STOKER, "worker", "--dispatcher", dispatcher,
                                                   "--http-port", "0", "--heartbeat-ms", "100"])
            worker_http.append(int(wait_for_line(wout, r"/healthz on port (\d+)", "worker").group(1)))
        consumer_http = free_port()

        prom_port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: {int(SCRAPE_INTERVAL_S * 1000)}ms
  scrape_timeout: {int(SCRAPE_INTERVAL_S * 1000) - 50}ms
scrape_configs:
  - job_name: dispatcher
    static_configs: [{{targets: ['127.0.0.1:{dispatcher_http}']}}]
  - job_name: worker
    static_configs: [{{targets: ['127.0.0.1:{worker_http[0]}', '127.0.0.1:{worker_http[1]}']}}]
  - job_name: consumer
    static_configs: [{{targets: ['127.0.0.1:{consumer_http}']}}]
""")
        cluster.start("prometheus", ["prometheus", f"--config.file={config}",
                                     f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}"])
        deadline = time.time() + 30
        while True:
            try:
                get(f"http://127.0.0.1:{prom_port}/-/ready", timeout=1)
                break
            except OSError:
                if time.time() > deadline:
                    fail("prometheus did not become ready: " +
                         open(os.path.join(work, "prometheus.out")).read()[-2000:])
                time.sleep(0.2)
        wait_for_value(prom_port, 'sum(up{job=~"dispatcher|worker"})', 3)
        wait_for_value(prom_port, "stoker_dispatcher_workers", 2)

        spec = {"source": {"dataset": base + "shards/"},
                "ops": [{"op": "shuffle", "seed": 7},
                        {"op": "decode_image", "field": "jpg"},
                        {"op": "random_resized_crop", "field": "jpg", "size": [32, 32]},
                        {"op": "batch", "size": 4}]}
        spec_path = os.path.join(work, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        # Two epochs; the consumer serves /metrics during the run and for 3 s after its end, so
        # that Prometheus scrapes its final counts. It spends 50 ms on each of its 60 batches, as a
        # trainer would, so that the job runs for 3 s, a dozen scrapes: the series of a running
        # job exist only while it runs (a job done in 0.3 s on a loaded machine was never scraped).
        consume = subprocess.Popen([STOKER, "consume", "--dispatcher", dispatcher, spec_path,
                                    "--epochs", "2", "--http-port", str(consumer_http),
                                    "--linger-ms", "3000", "--step-ms", "50"],
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        consumer_text = ""
        deadline = time.time() + 60
        while "stoker_client_delivered_elements_total" not in consumer_text:
            if consume.poll() is not None or time.time() > deadline:
                fail(f"the consumer's /metrics was not served: {consume.stderr.read()}")
            try:
                consumer_text = get(f"http://127.0.0.1:{consumer_http}/metrics", timeout=1)
            except OSError:
                time.sleep(0.05)
        promtool_check(consumer_text, "consumer")
        try:
            _, consume_err = consume.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            consume.kill()
            fail("consume did not finish within 60 s")
        if consume.returncode != 0:
            fail(f"consume failed: {consume_err}")
        m = re.search(r"consumed (\d+) elements \((\d+) samples, ([0-9.]+) MB\) of job (\d+) in "
                      r"([0-9.]+) s", consume_err)
        if not m:
            fail(f"consume's summary is missing: {consume_err}")
        elements, samples, seconds = int(m.group(1)), int(m.group(2)), float(m.group(5))
        job = m.group(4)
        if samples != 2 * 120 or elements != 2 * 30:
            fail(f"expected 60 batches of 240 samples, consume says: {consume_err}")

        # What the consumer received, as Prometheus saw it (the consumer has exited: its last
        # samples are found over a range, before the staleness marker).
        delivered = wait_for_value(
            prom_port, f'max_over_time(stoker_client_delivered_elements_total{{job_id="{job}"}}[5m])',
            elements)
        delivered_bytes = query(
            prom_port, f'max_over_time(stoker_client_delivered_bytes_total{{job_id="{job}"}}[5m])')
        if delivered_bytes is None or abs(delivered_bytes / 1e6 - float(m.group(3))) > 0.051:
            fail(f"delivered bytes {delivered_bytes} vs consume's {m.group(3)} MB")
        # The workers sent exactly that, and produced it (nothing was lost or resent here).
        wait_for_value(prom_port, f'sum(stoker_worker_sent_elements_total{{job_id="{job}"}})', elements)
        wait_for_value(prom_port, f'sum(stoker_worker_sent_bytes_total{{job_id="{job}"}})',
                       delivered_bytes)
        wait_for_value(prom_port, f'sum(stoker_worker_produced_elements_total{{job_id="{job}"}})',
                       elements)
        wait_for_value(prom_port, f'sum(stoker_worker_produced_bytes_total{{job_id="{job}"}})',
                       delivered_bytes)
        splits = query(prom_port, f'sum(stoker_worker_splits_total{{job_id="{job}"}})')
        wait_for_value(prom_port, "sum(stoker_dispatcher_splits_leased_total)", splits)
        wait_for_value(
            prom_port,
            f'max_over_time(stoker_client_splits_acknowledged_total{{job_id="{job}"}}[5m])', splits)
        wait_for_value(prom_port, 'stoker_dispatcher_jobs{state="finished"}', 1)
        # While it ran, the job's series carried its name: the display name `stoker consume`
        # sends for an unnamed job, and its info series the dataset it read.
        name = f"{pwd.getpwuid(os.geteuid()).pw_name}@{socket.gethostname()}:stoker consume"
        info = series_labels(prom_port, f'max_over_time(stoker_job_info{{job_id="{job}"}}[5m])')
        want = {"job_id": job, "job_name": name, "display_name": name,
                "dataset": base + "shards/", "instance": f"127.0.0.1:{dispatcher_http}",
                "job": "dispatcher"}
        if info != [want]:
            fail(f"stoker_job_info of job {job}: {info}, expected {[want]}")
        by_name = f'job_id="{job}",job_name="{name}"'
        wait_for_value(prom_port, f"max_over_time(stoker_job_epochs{{{by_name}}}[5m])", 2)
        # (positions: 0 until a worker counted them, which a scrape may not have seen)
        for series in ("positions", "positions_delivered", "epochs_done", "age_seconds",
                       "clients"):
            if query(prom_port, f"max_over_time(stoker_job_{series}{{{by_name}}}[5m])") is None:
                fail(f"no stoker_job_{series}{{{by_name}}} while the job ran")
        wait_for_value(prom_port, "stoker_dispatcher_workers", 2)
        # The trainer's time: waiting plus its own work is the time it ran (the consumer loop does
        # nothing else but its 50-ms steps, which are its work), and it did wait (the first element
        # comes after the job starts).
        wait = query(prom_port, f'max_over_time(stoker_client_wait_seconds_total{{job_id="{job}"}}[5m])')
        compute = query(prom_port,
                        f'max_over_time(stoker_client_compute_seconds_total{{job_id="{job}"}}[5m])')
        if wait is None or compute is None or not 0 < wait <= seconds + 0.01 or \
                not 0.05 * (elements - 1) <= compute <= seconds or wait + compute > seconds + 0.01:
            fail(f"wait {wait} s + compute {compute} s vs the consumer's {seconds} s")
        busy = query(prom_port, f'sum(stoker_worker_busy_seconds_total{{job_id="{job}"}})')
        if busy is None or busy <= 0:
            fail(f"worker busy seconds: {busy}")
        syncs = query(prom_port, "stoker_dispatcher_journal_sync_seconds_count")
        if syncs is None or syncs < 1:
            fail(f"journal syncs: {syncs}")
        # The workers read the shards over HTTP: successful GETs, bytes, latencies.
        gets = query(prom_port, 'sum(stoker_store_requests_total{method="GET",outcome="2xx"})')
        store_bytes = query(prom_port, "sum(stoker_store_received_bytes_total)")
        latencies = query(prom_port, 'sum(stoker_store_request_seconds_count{method="GET"})')
        shard_bytes = sum(os.path.getsize(os.path.join(d, f))
                          for d, _, fs in os.walk(os.path.join(data, "shards")) for f in fs)
        if not gets or gets != latencies or not store_bytes or store_bytes < shard_bytes:
            fail(f"store metrics: {gets} GETs, {latencies} timed, {store_bytes} bytes "
                 f"(the dataset has {shard_bytes})")
        p99 = query(prom_port, 'histogram_quantile(0.99, sum by (le) '
                               '(stoker_store_request_seconds_bucket{method="GET"}))')
        if p99 is None or not 0 < p99 <= 30:
            fail(f"p99 GET latency {p99}")

        # The exposition is valid for promtool, on every process.
        for name, port in [("dispatcher", dispatcher_http), ("worker", worker_http[0]),
                           ("worker", worker_http[1])]:
            text = get(f"http://127.0.0.1:{port}/metrics")
            promtool_check(text, name)
            with open(os.path.join(OUT_DIR, f"{name}-{port}.metrics.txt"), "w") as f:
                f.write(text)
        summary = (f"consumer received {elements} elements ({samples} samples, "
                   f"{delivered_bytes:.0f} bytes) in {seconds:.2f} s; Prometheus: delivered "
                   f"{delivered:.0f}, workers sent/produced the same, {splits:.0f} splits, "
                   f"wait {wait:.3f} s + compute {compute:.3f} s, {gets:.0f} store GETs "
                   f"({store_bytes:.0f} bytes, p99 {p99 * 1e3:.1f} ms), {syncs:.0f} journal syncs")
        with open(os.path.join(OUT_DIR, "summary.txt"), "w") as f:
            f.write(summary + "\n")
        print(summary)
    finally:
        cluster.stop()
        if nginx_started:
            subprocess.run([HTTP_SERVER, "stop", http_dir], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print("prometheus test: OK")


if __name__ == "__main__":
    main()
