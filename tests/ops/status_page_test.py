#!/usr/bin/python3
"""The dispatcher's status page (docs/operations.md, "Status page") loaded in Debian's headless
Chromium, with real processes: a dispatcher, two workers and `stoker consume`.

Job 1 (named with HTML metacharacters) runs to completion; job 2 (unnamed) runs with its consumer
stopped (SIGSTOP), so that its acknowledged splits and consumers hold still. The DOM Chromium built
must show the workers (count, ids and addresses as the workers logged them, healthy), job 1
finished with every split and every position the consumer received, job 2 under the display name
its consumer sent (`<user>@<host>:stoker consume`), with its age, dataset, consumer and splits as
the dispatcher's /metrics says and why it still runs (it waits for the stopped consumer's
timeout), the events, and job 1's name as text (escaped, no <b> element). A screenshot stays in
OUT_DIR.

Usage: status_page_test.py STOKER OUT_DIR
"""
import glob
import html.parser
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
import time

from ops_common import fail, http_get, metric, read, wait_for

STOKER, OUT_DIR = sys.argv[1:3]
CHROMIUM = "/usr/bin/chromium"
JOB_NAME = 'page<b>&"test'
# What `stoker consume` names a job operators see (its display name).
CONSUME_NAME = f"{pwd.getpwuid(os.geteuid()).pw_name}@{socket.gethostname()}:stoker consume"


class Tables(html.parser.HTMLParser):
    """Cell texts of every <table id=...>: {id: [[cell, ...], ...]} (header rows included), and
    the tags seen."""

    def __init__(self):
        super().__init__()
        self.tables, self.tags, self.spans = {}, set(), {}
        self._table = self._row = self._cell = self._span = None

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._table = self.tables.setdefault(attrs["id"], [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
        elif tag == "span" and attrs.get("id"):
            self._span = attrs["id"]
            self.spans[self._span] = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "span":
            self._span = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._span is not None:
            self.spans[self._span] += data


def chromium(url, profile, extra, timeout=90):
    """Runs headless Chromium on `url` in its own process group and profile; returns its stdout.
    Every process left in the group, or using the profile, is killed afterwards."""
    p = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={profile}", "--no-first-run"] + extra + [url],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        fail(f"chromium did not finish on {url} within {timeout} s")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        kill_profile_users(profile)
    if p.returncode != 0:
        fail(f"chromium exited with {p.returncode} on {url}")
    return out.decode()


def kill_profile_users(profile):
    """Kills (by pid) any process whose command line names `profile` (a Chromium helper that
    left the process group)."""
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if profile.encode() in open(cmdline, "rb").read():
                os.kill(int(cmdline.split("/")[2]), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def read_bytes(path):
    try:
        return open(path, "rb").read()
    except OSError:
        return b""


def main():
    if not os.access(CHROMIUM, os.X_OK):
        fail(f"{CHROMIUM} not found: install Debian's chromium (scripts/install-deps.sh)")
    os.makedirs(OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="stoker-status-")
    profile = os.path.join(work, "chromium-profile")
    procs = []

    def start(name, args):
        p = subprocess.Popen(args, stdout=open(os.path.join(work, f"{name}.out"), "w"),
                             stderr=open(os.path.join(work, f"{name}.err"), "w"))
        procs.append(p)
        return p

    try:
        # Consumers stay registered while stopped: a long client timeout.
        start("dispatcher", [STOKER, "dispatcher", "--port", "0", "--http-port", "0",
                             "--client-timeout-ms", "600000"])
        m = wait_for(lambda: re.search(r"serving on port (\d+), /healthz on port (\d+)",
                                       read(os.path.join(work, "dispatcher.out"))), "dispatcher",
                     timeout=60)
        dispatcher, http = f"127.0.0.1:{m.group(1)}", int(m.group(2))
        for i in range(2):
            start(f"worker{i}", [STOKER, "worker", "--dispatcher", dispatcher, "--http-port", "0",
                                 "--heartbeat-ms", "200", "--buffer-bytes", "64K"])
        wait_for(lambda: metric(http, "stoker_dispatcher_workers") == 2, "2 workers registered",
                 timeout=60)
        registered = {}  # worker id -> address, as each worker logged it
        for i in range(2):
            m = wait_for(lambda: re.search(r"worker (\S+): registered as worker (\d+)",
                                           read(os.path.join(work, f"worker{i}.err"))),
                         f"worker {i} registered", timeout=60)
            registered[m.group(2)] = m.group(1)

        status, body = http_get(http, "/")
        if status != 200 or "<meta http-equiv=\"refresh\"" not in body:
            fail(f"GET / answered {status}:\n{body[:2000]}")
        for external in ("<script", "<link", "src=", "@import", "url("):
            if external in body:
                fail(f"the status page is not self-contained ({external!r}):\n{body}")

        # Job 1 to completion.
        samples = 20000
        spec = os.path.join(work, "spec.json")
        with open(spec, "w") as f:
            json.dump({"source": {"range": samples}, "ops": [{"op": "batch", "size": 100}]}, f)
        done = subprocess.run([STOKER, "consume", "--dispatcher", dispatcher, spec,
                               "--job-name", JOB_NAME, "--print-keys"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            fail(f"consume of job 1 failed: {done.stderr}")
        keys = done.stdout.split()
        if len(keys) != samples or len(set(keys)) != samples:  # a key per sample
            fail(f"job 1: {len(keys)} keys ({len(set(keys))} distinct), expected {samples}")
        job1_splits = wait_for(
            lambda: metric(http, 'stoker_dispatcher_updates_total{type="create_split"}'),
            "job 1's splits counted")
        if metric(http, 'stoker_dispatcher_updates_total{type="lease_split"}'):
            fail("a split of job 1 was leased again; the counts below would not hold")

        # Job 2 running, its consumer stopped after a split was acknowledged.
        spec2 = os.path.join(work, "spec2.json")
        with open(spec2, "w") as f:
            json.dump({"source": {"range": 10000000}, "ops": [{"op": "batch", "size": 1000}]}, f)
        consumer = start("consume2", [STOKER, "consume", "--dispatcher", dispatcher, spec2])
        labels2 = f'job_id="2",job_name="{CONSUME_NAME}"'
        wait_for(lambda: (metric(http, f'stoker_job_splits{{{labels2},state="done"}}') or 0) >= 1,
                 "a split of job 2 delivered", timeout=60)
        consumer.send_signal(signal.SIGSTOP)
        # Silent for 2 s: the page says the job waits for its consumer's timeout.
        wait_for(lambda: "waiting for consumer" in http_get(http, "/")[1],
                 "job 2 waiting for its stopped consumer", timeout=30)

        # The page against /metrics: read both around the page, until they agree (an ack in
        # flight when the consumer stopped may still land).
        def job2_metrics():
            return {k: metric(http, f'stoker_job_{k}')
                    for k in (f'clients{{{labels2}}}', f'positions{{{labels2}}}',
                              f'positions_delivered{{{labels2}}}', f'silent_clients{{{labels2}}}',
                              f'splits{{{labels2},state="done"}}')}

        deadline = time.time() + 60
        while True:
            before = job2_metrics()
            workers_metric = metric(http, "stoker_dispatcher_workers")
            dom = chromium(f"http://127.0.0.1:{http}/", profile, ["--dump-dom"])
            after = job2_metrics()
            if before == after or time.time() > deadline:
                break
            time.sleep(0.5)
        if before != after:
            fail(f"job 2's metrics keep changing with its consumer stopped: {before} {after}")
        with open(os.path.join(OUT_DIR, "status.dom.html"), "w") as f:
            f.write(dom)

        page = Tables()
        page.feed(dom)
        for table in ("workers", "jobs", "events"):
            if table not in page.tables:
                fail(f"no table {table!r} in the DOM:\n{dom}")
        # Workers.
        if page.spans.get("worker-count") != str(int(workers_metric)):
            fail(f"worker count {page.spans.get('worker-count')!r}, /metrics says "
                 f"{workers_metric}")
        header, *rows = page.tables["workers"]
        if header != ["id", "address", "state", "tasks", "splits leased", "busy share",
                      "elements/s"]:
            fail(f"workers header {header}")
        shown = {r[0]: r[1] for r in rows}
        if shown != registered:
            fail(f"workers shown {shown}, registered {registered}")
        leased_labels = set(re.findall(r'stoker_dispatcher_splits_leased_total\{worker="([^"]+)"\}',
                                       http_get(http, "/metrics")[1]))
        if not leased_labels or not leased_labels <= set(shown.values()):
            fail(f"/metrics leased splits to {leased_labels}, the page shows {shown}")
        for r in rows:
            if r[2] != "healthy" or r[3] != "1":
                fail(f"worker row {r}: expected healthy, running 1 task (job 2)")
            # Load of the last interval: a share and a rate, or "-" before the first interval.
            if r[5] != "-" and not (0 <= float(r[5]) <= 1 and float(r[6]) >= 0):
                fail(f"worker row {r}: busy share / elements per second out of range")
        # The worker count: actual as registered, no autoscaler here.
        if (page.spans.get("actual-workers") != str(int(workers_metric)) or
                page.spans.get("target-workers") != "off" or
                "recommended-workers" not in page.spans):
            fail(f"worker counts {page.spans}, /metrics says {workers_metric} workers")
        # Jobs, newest first.
        header, *rows = page.tables["jobs"]
        columns = ["id", "name", "created by", "age", "dataset", "state", "consumers",
                   "epochs done", "positions delivered", "splits done", "splits outstanding",
                   "elements/s", "stall ratio"]
        if header != columns:
            fail(f"jobs header {header}")
        jobs = {r[0]: dict(zip(columns, r)) for r in rows}
        if set(jobs) != {"1", "2"}:
            fail(f"jobs shown: {rows}")
        age_re = r"\d+ s|\d+ min \d+ s"
        row1 = jobs["1"]
        want1 = {"id": "1", "name": JOB_NAME, "created by": CONSUME_NAME, "age": row1["age"],
                 "dataset": f"range {samples}", "state": "finished", "consumers": "0",
                 "epochs done": "1 / 1", "positions delivered": f"{samples} / {samples}",
                 "splits done": f"{int(job1_splits)} / {int(job1_splits)}",
                 "splits outstanding": "0", "elements/s": "-", "stall ratio": "-"}
        if row1 != want1 or not re.fullmatch(age_re, row1["age"]):
            fail(f"job 1 row {row1}, expected {want1}")
        if 'page&lt;b&gt;&amp;"test' not in dom or "<b>" in dom or "b" in page.tags:
            fail("job 1's name is not escaped in the page")
        row2 = jobs["2"]
        done2 = int(after[f'splits{{{labels2},state="done"}}'])
        positions2 = int(after[f'positions{{{labels2}}}'])
        delivered2 = int(after[f'positions_delivered{{{labels2}}}'])
        reason = re.fullmatch(r"running: no consumer is reading: waiting for consumer (\d+)'s "
                              r"timeout \((\d+) s left\)", row2["state"])
        if (row2["name"] != CONSUME_NAME or row2["created by"] != CONSUME_NAME or
                not re.fullmatch(age_re, row2["age"]) or row2["dataset"] != "range 10000000" or
                not reason or not 0 < int(reason.group(2)) <= 600 or
                row2["consumers"] != f"1 ({reason.group(1)})" or
                int(after[f'clients{{{labels2}}}']) != 1 or
                int(after[f'silent_clients{{{labels2}}}']) != 1 or
                row2["epochs done"] != "0 / 1" or
                row2["positions delivered"] != f"{delivered2} / {positions2}" or
                not row2["splits done"].startswith(f"{done2} / ")):
            fail(f"job 2 row {row2}, /metrics says {after}")
        total2 = int(row2["splits done"].split(" / ")[1])
        outstanding2 = int(row2["splits outstanding"])
        leased_now = sum(int(r[4]) for r in page.tables["workers"][1:])
        if total2 != done2 + outstanding2 or leased_now > outstanding2:
            fail(f"job 2 row {row2}: splits done + outstanding != total, or workers lease "
                 f"{leased_now}")
        # Events: the workers joined, job 1 finished.
        events = [r[2] for r in page.tables["events"][1:]]
        for want in [f"worker {i} joined at {a}" for i, a in registered.items()] + [
                f"job 1 finished: 1 epoch(s) of {samples} samples delivered in "
                f"{int(job1_splits)} splits"]:
            if want not in events:
                fail(f"event {want!r} not in {events}")

        png = os.path.join(os.path.abspath(OUT_DIR), "status.png")
        if os.path.exists(png):
            os.remove(png)
        chromium(f"http://127.0.0.1:{http}/", profile,
                 [f"--screenshot={png}", "--window-size=1200,800", "--hide-scrollbars"])
        if not os.path.exists(png) or open(png, "rb").read(8) != b"\x89PNG\r\n\x1a\n":
            fail(f"no screenshot at {png}")
        print(f"status page: 2 workers, jobs {rows[0][0]} and {rows[1][0]}; screenshot and DOM "
              f"in {os.path.abspath(OUT_DIR)}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
        kill_profile_users(profile)
        shutil.rmtree(work, ignore_errors=True)
    left = [c for c in glob.glob("/proc/[0-9]*/cmdline") if profile.encode() in read_bytes(c)]
    if left:
        fail(f"chromium processes left behind: {left}")
    print("status page test: OK")


if __name__ == "__main__":
    main()
