"""P1 (streaming): `stoker cat` of a 512 MiB object from nginx vs 16 parallel ranged curls.

Both write to /dev/null. Besides wall time it reports the client's CPU-seconds (user + system of
the child processes: stoker, or the 16 curls) and its minor page faults, so bytes per CPU-second
can be compared: on a trainer host the client's CPU per byte is the limit, not the loopback.
"""
import os
import resource
import statistics
import subprocess
import time

import lib

OBJECT_BYTES = 512 << 20
PARALLEL = 16


def timed(action):
    """Wall seconds, child CPU seconds and child minor faults of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    action()
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, after.ru_minflt - before.ru_minflt


def run(ctx):
    root = os.path.join(ctx.tmp, "p1-www")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "obj512"), "wb") as f:
        for _ in range(OBJECT_BYTES // (8 << 20)):
            f.write(os.urandom(8 << 20))
    base, _ = ctx.http(root)
    url = f"{base}/obj512"
    devnull = subprocess.DEVNULL

    def stoker_cat():
        subprocess.run([ctx.stoker, "cat", url], stdout=devnull, check=True)

    def curls():
        part = OBJECT_BYTES // PARALLEL
        procs = [subprocess.Popen(["curl", "-sSf", "-o", "/dev/null", "-r",
                                   f"{i * part}-{(i + 1) * part - 1}", url])
                 for i in range(PARALLEL)]
        if any(p.wait() != 0 for p in procs):
            raise RuntimeError("a ranged curl failed")

    repeat = max(3, ctx.repeat)
    results = {}
    for name, action in [("stoker cat", stoker_cat), (f"{PARALLEL} parallel ranged curls", curls)]:
        action()  # warm nginx's page cache and the connection path
        runs = [timed(action) for _ in range(repeat)]
        results[name] = runs
        lib.log(f"P1 {name}: {[round(r[0], 3) for r in runs]} s, "
                f"CPU {[round(r[1], 2) for r in runs]} s")
    load = os.getloadavg()

    def med(name, i):
        return statistics.median(r[i] for r in results[name])

    gb = OBJECT_BYTES / 1e9
    rows = []
    for name in results:
        seconds, cpu, faults = med(name, 0), med(name, 1), med(name, 2)
        rows.append((name, seconds, gb / seconds, cpu, gb / cpu, faults))
    stoker, curl = rows[0], rows[1]
    lines = [
        "# P1: `stoker cat` vs 16 parallel ranged curls (nginx on 127.0.0.1)",
        "",
        lib.machine_line(),
        f"Load average when measured: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (shared with "
        "other engineers' builds: wall times are noisy; CPU-seconds less so).",
        "",
        f"One {OBJECT_BYTES >> 20} MiB object, written to /dev/null. Medians of {repeat} runs after "
        "one warm-up run each. Client CPU = user + system seconds of the client processes.",
        "",
        "| reader | seconds | GB/s | client CPU s | GB per CPU-second | minor page faults |",
        "|---|---|---|---|---|---|",
        *[f"| {r[0]} | {r[1]:.3f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.0f} |"
          for r in rows],
        "",
        f"- speed, stoker / curls: **{curl[1] / stoker[1]:.2f}** (goal >= 0.9)",
        f"- bytes per CPU-second, stoker / curls: **{stoker[4] / curl[4]:.2f}** (goal >= 0.8)",
        "",
    ]
    ctx.write_result("cat", "\n".join(lines))
