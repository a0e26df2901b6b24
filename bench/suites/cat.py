"""P1 (streaming): `stoker cat` of a 512 MiB object from nginx on 127.0.0.1 against the strongest
form of the trivial way: ONE `curl -Z --parallel-max 16` process fetching the object as 16 ranged
transfers (libcurl's multi interface: one process, one event loop), and one plain `curl`.

Every reader runs in the same run on the same object, in rounds (each round runs every reader once,
in turn, right after re-reading the object into the page cache: pages untouched for about a minute
are reclaimed on this machine). Per reader: wall seconds, and the CPU-seconds (user + system) and
minor page faults of that one process, from wait4(). Medians over the rounds; ratios of medians.

Two sinks: /dev/null, and a pipe read by `cat > /dev/null` (the reader's CPU is not counted; the
pipe's peer is a plain curl writing to the same kind of pipe).
"""
import os
import statistics
import subprocess
import time

import lib

OBJECT_BYTES = 512 << 20
PARALLEL = 16
GOALS = {"speed": 1.0, "cpu": 0.8, "cpu_single": 0.6}  # issue 25


def warm(path):
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass


def run_once(cmd, to_pipe):
    """(wall s, CPU s, minor faults) of `cmd`, its stdout /dev/null or a pipe drained by cat."""
    reader = None
    start = time.perf_counter()
    if to_pipe:
        r, w = os.pipe()
        proc = subprocess.Popen(cmd, stdout=w)
        reader = subprocess.Popen(["cat"], stdin=r, stdout=subprocess.DEVNULL)
        os.close(w)
        os.close(r)
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if reader is not None:
        reader.wait()
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_minflt


def measure(ctx, repeat=None):
    """Runs P1; returns {reader: (median s, median CPU s, median minor faults)} and the load."""
    root = os.path.join(ctx.tmp, "p1-www")
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "obj512")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            for _ in range(OBJECT_BYTES // (8 << 20)):
                f.write(os.urandom(8 << 20))
    base, _ = ctx.http(root)
    url = f"{base}/obj512"
    part = OBJECT_BYTES // PARALLEL
    config = os.path.join(ctx.tmp, "p1-curl.cfg")
    with open(config, "w") as f:
        for i in range(PARALLEL):
            f.write(f'url = "{url}"\nrange = {i * part}-{(i + 1) * part - 1}\noutput = "/dev/null"\n')

    readers = {
        "stoker cat > /dev/null": ([ctx.stoker, "cat", url], False),
        f"one curl -Z --parallel-max {PARALLEL}, {PARALLEL} ranges > /dev/null":
            (["curl", "-sSf", "--no-progress-meter", "-Z", "--parallel-max", str(PARALLEL), "-K", config], False),
        "one plain curl > /dev/null": (["curl", "-sSf", "-o", "/dev/null", url], False),
        "stoker cat | cat": ([ctx.stoker, "cat", url], True),
        "one plain curl | cat": (["curl", "-sSf", url], True),
    }
    repeat = repeat or max(5, ctx.repeat)
    runs = {name: [] for name in readers}
    warm(path)
    for cmd, to_pipe in readers.values():
        run_once(cmd, to_pipe)  # warm-up: nginx's workers, the connection path, the binaries
    loads = []
    for _ in range(repeat):
        loads.append(os.getloadavg()[0])
        for name, (cmd, to_pipe) in readers.items():
            warm(path)
            runs[name].append(run_once(cmd, to_pipe))
    for name, r in runs.items():
        lib.log(f"P1 {name}: {[round(x[0], 3) for x in r]} s, CPU {[round(x[1], 3) for x in r]} s, "
                f"faults {[x[2] for x in r]}")
    medians = {name: tuple(statistics.median(x[i] for x in r) for i in range(3))
               for name, r in runs.items()}
    return medians, runs, statistics.median(loads)


def ratios(medians):
    """The goal's ratios (stoker / peer, higher is better) from measure()'s medians."""
    names = list(medians)
    stoker, parallel, single = medians[names[0]], medians[names[1]], medians[names[2]]
    pipe_stoker, pipe_single = medians[names[3]], medians[names[4]]
    return {
        "speed": parallel[0] / stoker[0],           # wall time, peer / stoker
        "cpu": parallel[1] / stoker[1],             # bytes per CPU-s, stoker / peer
        "cpu_single": single[1] / stoker[1],
        "pipe_speed": pipe_single[0] / pipe_stoker[0],
        "pipe_cpu": pipe_single[1] / pipe_stoker[1],
    }


def run(ctx):
    medians, runs, load = measure(ctx)
    r = ratios(medians)
    gb = OBJECT_BYTES / 1e9
    repeat = len(next(iter(runs.values())))
    loadavg = os.getloadavg()

    def verdict(value, goal):
        return "met" if value >= goal else "not met"

    lines = [
        f"# P1: `stoker cat` vs one parallel curl process and one plain curl (nginx on 127.0.0.1)",
        "",
        lib.machine_line(),
        f"Load average (1 min) at the start of the rounds, median: {load:.2f}; at the end: "
        f"{loadavg[0]:.2f}, {loadavg[1]:.2f}, {loadavg[2]:.2f}. On a loaded machine wall times follow "
        "the CPU share each process gets; CPU-seconds per GB are the steadier figure.",
        "",
        f"One {OBJECT_BYTES >> 20} MiB object. {repeat} rounds after one warm-up run of each "
        "reader; each round runs every reader once, right after re-reading the object into the page "
        "cache. Medians. CPU = user + system seconds of that one process (wait4), not nginx's and "
        "not the pipe reader's.",
        "",
        "| reader | seconds | GB/s | CPU s | CPU s per GB | GB per CPU-second | minor page faults |",
        "|---|---|---|---|---|---|---|",
        *[f"| {name.replace('|', chr(92) + '|')} | {m[0]:.3f} | {gb / m[0]:.2f} | {m[1]:.3f} | {m[1] / gb:.3f} | {gb / m[1]:.2f} "
          f"| {m[2]:.0f} |" for name, m in medians.items()],
        "",
        f"- speed, stoker / one parallel curl: **{r['speed']:.2f}** (goal >= {GOALS['speed']}: "
        f"{verdict(r['speed'], GOALS['speed'])})",
        f"- bytes per CPU-second, stoker / one parallel curl: **{r['cpu']:.2f}** "
        f"(goal >= {GOALS['cpu']}: {verdict(r['cpu'], GOALS['cpu'])})",
        f"- bytes per CPU-second, stoker / one plain curl: **{r['cpu_single']:.2f}** "
        f"(goal >= {GOALS['cpu_single']}: {verdict(r['cpu_single'], GOALS['cpu_single'])})",
        f"- into a pipe, stoker / plain curl: speed **{r['pipe_speed']:.2f}**, bytes per CPU-second "
        f"**{r['pipe_cpu']:.2f}**",
        "",
        "Every run (seconds / CPU s):",
        "",
        *[f"- {name}: {', '.join(f'{x[0]:.3f}/{x[1]:.3f}' for x in rs)}" for name, rs in runs.items()],
        "",
    ]
    ctx.write_result("cat", "\n".join(lines))
