"""P4 (issue 5): the same pipeline in-process (`stoker run`) vs through one local worker on loopback
(`stoker dispatcher` + `stoker worker` + `stoker consume`, real processes): throughput ratio for
1 MiB elements (goal >= 0.85) and elements/s for 1 KiB elements (goal >= 50,000/s).

P5 (scale-out over a slow store) and the dispatcher's split capacity are not measured yet.
"""
import json
import os
import re
import socket
import statistics
import subprocess
import time
import urllib.request

import lib


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_dataset(ctx, name, count, size):
    tree = os.path.join(ctx.tmp, f"{name}-tree", "c")
    os.makedirs(tree)
    for i in range(count):
        with open(os.path.join(tree, f"{i:06d}.bin"), "wb") as f:
            f.write(os.urandom(size))
    ds = os.path.join(ctx.tmp, f"{name}-ds")
    lib.run([ctx.stoker, "convert", os.path.dirname(tree), ds])
    spec = os.path.join(ctx.tmp, f"{name}.json")
    with open(spec, "w") as f:
        json.dump({"source": {"dataset": ds + "/"}, "ops": [{"op": "map_field", "drop": ["cls"]}]}, f)
    return spec


def wait_healthy(port, what, deadline_s=30):
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not become healthy within {deadline_s} s")


class Cluster:
    """A dispatcher and one worker as real processes on loopback."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        self.port = free_port()
        dispatcher_http, worker_http = free_port(), free_port()
        work_dir = os.path.join(self.ctx.tmp, f"dispatcher-{self.port}")
        self.procs = [subprocess.Popen(
            [self.ctx.stoker, "dispatcher", "--port", str(self.port), "--http-port",
             str(dispatcher_http), "--work-dir", work_dir], stdout=subprocess.DEVNULL)]
        wait_healthy(dispatcher_http, "dispatcher")
        self.procs.append(subprocess.Popen(
            [self.ctx.stoker, "worker", "--dispatcher", f"127.0.0.1:{self.port}", "--port",
             str(free_port()), "--http-port", str(worker_http)], stdout=subprocess.DEVNULL))
        wait_healthy(worker_http, "worker")
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def rate(stderr, pattern, what):
    m = re.search(pattern, stderr)
    if not m:
        raise RuntimeError(f"no {what} in: {stderr[-500:]}")
    return float(m.group(1))


def run(ctx):
    specs = {"1 MiB": make_dataset(ctx, "p4-1mib", 300, 1 << 20),
             "1 KiB": make_dataset(ctx, "p4-1kib", 60000, 1 << 10)}
    rows = []
    with Cluster(ctx) as cluster:
        for label, spec in specs.items():
            local, remote = [], []
            for _ in range(ctx.repeat):
                err = lib.run([ctx.stoker, "run", spec]).stderr
                local.append((rate(err, r"([0-9.]+) elements/s", "elements/s"),
                              rate(err, r"([0-9.]+) MB/s", "MB/s")))
                err = lib.run([ctx.stoker, "consume", "--dispatcher", f"127.0.0.1:{cluster.port}",
                               spec]).stderr
                remote.append((rate(err, r"([0-9.]+) elements/s", "elements/s"),
                               rate(err, r"([0-9.]+) MB/s", "MB/s")))
            med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
            rows.append((label, med(local, 0), med(local, 1), med(remote, 0), med(remote, 1)))
            lib.log(f"P4 {label}: in-process {rows[-1][1]:.0f} el/s {rows[-1][2]:.0f} MB/s; "
                    f"service {rows[-1][3]:.0f} el/s {rows[-1][4]:.0f} MB/s")
    lines = [
        "# The service: P4 (issue 5)",
        "",
        lib.machine_line(),
        f"Medians of {ctx.repeat} runs. In-process: `stoker run SPEC`. Service: `stoker consume` "
        "against a `stoker dispatcher` and one `stoker worker`, all real processes on 127.0.0.1 "
        "(the worker and the consumer share the 2 cores). The pipeline reads a local stoker dataset "
        "(no decode), one element per sample.",
        "",
        "| elements | in-process elements/s | in-process MB/s | service elements/s | service MB/s | service / in-process |",
        "|---|---|---|---|---|---|",
        *[f"| {r[0]} | {r[1]:.0f} | {r[2]:.0f} | {r[3]:.0f} | {r[4]:.0f} | {r[4] / r[2]:.2f} |" for r in rows],
        "",
        f"- 1 MiB elements, service / in-process throughput: **{rows[0][4] / rows[0][2]:.2f}** (goal >= 0.85)",
        f"- 1 KiB elements through the service: **{rows[1][3]:.0f} elements/s** (goal >= 50,000/s)",
        "- P5 (scale-out over a store with 20 ms added latency) and the dispatcher's split capacity: "
        "not measured yet.",
        "",
    ]
    ctx.write_result("service", "\n".join(lines))
