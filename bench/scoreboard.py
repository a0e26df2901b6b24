#!/usr/bin/python3
"""`make bench-scoreboard`: every P-figure of issue 25 beside its strongest peer, in one run, idle and
under a fixed background load, written to bench/results/scoreboard.md.

P1 is measured here (bench/suites/cat.py's measure(): `stoker cat` against one `curl -Z
--parallel-max 16` process and one plain curl). The other figures come from the existing suites of
bench/run.py, run as they are (into a scratch results folder, so bench/results/*.md keep their
own runs); the scoreboard reads each suite's ratio out of the text it wrote. A figure whose suite
fails, or whose text no longer has the ratio, is reported as not measured, with the reason: no
figure is made up. --quick measures P1 only (3 rounds) for development.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "suites"))
import lib  # noqa: E402
import cat  # noqa: E402

# (figure, goal text, peer, suite, [(what, regex on the suite's text, goal test)])
SUITE_FIGURES = [
    ("P3", "decode", "TurboJPEG tjDecompress2 ceiling (per CPU-second)", "pipeline", "p3",
     r"TurboJPEG tjDecompress2 full-scale ceiling: ([\d.]+)", ">= 0.8", lambda v: v >= 0.8),
    ("P3", "wall time", "PyTorch DataLoader + torchvision, workers = cores", "pipeline", "p3",
     r"DataLoader \d+ workers: ([\d.]+)x", ">= 2.5x", lambda v: v >= 2.5),
    ("P4", "co-located, shared memory", "in-process pipeline", "service_shm", "service_shm",
     r"shared memory / in-process: \*\*([\d.]+)\*\* end to end", ">= 0.85", lambda v: v >= 0.85),
    ("P6", "worker CPU, cross-trainer cache", "separate jobs", "sharing", "sharing",
     r"cross-trainer cache: \*\*([\d.]+)x\*\*", "<= 0.35x", lambda v: v <= 0.35),
    ("P8", "epoch 2 from the block cache", "memcpy", "block_cache", "block_cache",
     r"memcpy rate: \*\*([\d.]+)\*\*", ">= 0.5", lambda v: v >= 0.5),
    ("P8", "MB from the store in epoch 2", "(none: goal 0)", "block_cache", "block_cache",
     r"\*\*([\d.]+) MB in epoch 2\*\*", "0", lambda v: v == 0),
    ("P10", "whole-run trainer stall", "fixed pool", "autoscale", "autoscale",
     r"stall ratio <= 1\.1x the fixed pool's \(whole run\) \| ([\d.]+)x", "<= 1.1x",
     lambda v: v <= 1.1),
    ("P10", "whole-run trainer stall, the same pipeline again", "fixed pool", "autoscale",
     "autoscale", r"a second job of the same pipeline \(its need remembered\) \| ([\d.]+)x",
     "<= 1.1x", lambda v: v <= 1.1),
    ("P12", "warm, batched reader", "Python open/read loop over the original files", "local_io",
     "local_io", r"stoker batched / original files one by one: \*\*([\d.]+)x\*\*", ">= 1.2x",
     lambda v: v >= 1.2),
    ("P12", "cold, random O_DIRECT", "fio random 100 KiB, QD32", "local_io", "local_io",
     r"stoker random O_DIRECT / fio random: \*\*([\d.]+)x\*\*", ">= 0.9x", lambda v: v >= 0.9),
]


class ScratchContext(lib.Context):
    """A bench context whose suites write their result text into a scratch folder."""

    def __init__(self, build_dir, repeat):
        super().__init__(build_dir, repeat)
        self.results_dir = os.path.join(self.tmp, "results")


class BackgroundLoad:
    """A fixed CPU load: `stress-ng --cpu N` where installed, else N busy-loop processes."""

    def __init__(self, cpus):
        self.cpus = cpus
        self.procs = []
        self.what = ""

    def __enter__(self):
        if self.cpus <= 0:
            self.what = "none"
            return self
        if shutil.which("stress-ng"):
            self.procs = [subprocess.Popen(["stress-ng", "--quiet", "--cpu", str(self.cpus)])]
            self.what = f"stress-ng --cpu {self.cpus}"
        else:
            self.procs = [subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"])
                          for _ in range(self.cpus)]
            self.what = f"{self.cpus} busy-loop process(es) (stress-ng not installed)"
        time.sleep(2)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def fmt_load():
    a = os.getloadavg()
    return f"{a[0]:.1f}, {a[1]:.1f}, {a[2]:.1f}"


# P1's rounds (each reader once a round, interleaved): a run is ~0.25 s and the machine moves
# +-30% between seconds, so 5 rounds' medians put the speed ratio anywhere in 0.9-1.3.
P1_ROUNDS = 9


def p1_rows(ctx, repeat):
    load = fmt_load()
    try:
        medians, _, _ = cat.measure(ctx, repeat)
    except Exception as e:  # a failed figure is reported, not hidden
        traceback.print_exc()
        return [("P1", "all", "-", f"not measured: {e}", "-", "-", load)]
    r = cat.ratios(medians)
    names = list(medians)
    gb = cat.OBJECT_BYTES / 1e9

    def figure(name):
        s, cpu, _ = medians[name]
        return f"{s:.3f} s, {cpu / gb:.3f} CPU-s/GB"

    stoker = figure(names[0])
    return [
        ("P1", "speed >= 1.0x", f"one curl -Z --parallel-max 16: {figure(names[1])}", stoker,
         f"{r['speed']:.2f}", "yes" if r["speed"] >= 1.0 else "no", load),
        ("P1", "bytes per CPU-s >= 0.8x", "one curl -Z --parallel-max 16", stoker,
         f"{r['cpu']:.2f}", "yes" if r["cpu"] >= 0.8 else "no", load),
        ("P1", "bytes per CPU-s >= 0.6x", f"one plain curl: {figure(names[2])}", stoker,
         f"{r['cpu_single']:.2f}", "yes" if r["cpu_single"] >= 0.6 else "no", load),
    ]


def suite_rows(ctx):
    rows, texts, failures = [], {}, {}
    for figure, what, peer, suite, result, pattern, goal, test in SUITE_FIGURES:
        if suite not in texts and suite not in failures:
            load = fmt_load()
            lib.log(f"scoreboard: suite {suite}")
            try:
                module = __import__(suite)
                module.run(ctx)
                with open(os.path.join(ctx.results_dir, f"{result}.md")) as f:
                    texts[suite] = (f.read(), load)
            except Exception as e:
                traceback.print_exc()
                failures[suite] = (f"suite {suite} failed: {type(e).__name__}: {e}"[:200], load)
        if suite in failures:
            reason, load = failures[suite]
            rows.append((figure, f"{what} {goal}", peer, f"not measured: {reason}", "-", "-", load))
            continue
        text, load = texts[suite]
        match = re.search(pattern, text)
        if match is None:
            rows.append((figure, f"{what} {goal}", peer,
                         f"not measured: bench/suites/{suite}.py's text has no such ratio", "-",
                         "-", load))
            continue
        value = float(match.group(1))
        rows.append((figure, f"{what} {goal}", peer, f"bench/suites/{suite}.py", f"{value:g}",
                     "yes" if test(value) else "no", load))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build", help="build folder (with the stoker binary)")
    parser.add_argument("--quick", action="store_true", help="P1 only, 3 rounds")
    parser.add_argument("--load-cpus", type=int, default=1,
                        help="busy CPUs of the background load for the loaded pass (0: skip it)")
    parser.add_argument("--out", default=os.path.join(lib.SOURCE_DIR, "bench", "results",
                                                      "scoreboard.md"))
    args = parser.parse_args()
    # P8 on 512 MiB (5,368 samples), not the suite's default 2 GiB: epoch 2 from the cache is the
    # same memory-speed read either way, and the runs without the cache (about 10 MB/s from the
    # Swift server here) would take most of an hour at 2 GiB.
    os.environ.setdefault("STOKER_BENCH_P8_BYTES", str(512 << 20))
    repeat = 3 if args.quick else 5
    passes = [0] + ([args.load_cpus] if args.load_cpus > 0 else [])
    sections = []
    for cpus in passes:
        ctx = ScratchContext(args.build, repeat)
        try:
            with BackgroundLoad(cpus) as load:
                lib.log(f"scoreboard pass: background load {load.what}")
                started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                rows = p1_rows(ctx, 3 if args.quick else P1_ROUNDS)
                if args.quick:
                    rows.append(("P3, P4, P6, P8, P10, P12", "-", "-", "skipped (--quick)", "-",
                                 "-", fmt_load()))
                else:
                    rows += suite_rows(ctx)
        finally:
            ctx.close()
        sections.append((load.what, started, rows))
    lines = [
        "# Scoreboard: every P-figure beside its strongest peer (issue 25)",
        "",
        lib.machine_line(),
        "Written by `make bench-scoreboard` (bench/scoreboard.py"
        + (" --quick" if args.quick else "") + "). Ratios are stoker / peer as each suite states "
        "them (for P6 and P10 lower is better). Load average: 1, 5 and 15 minutes when the figure "
        "started; the machine is shared, so wall-time ratios move with it, CPU-seconds less.",
        "",
    ]
    for what, started, rows in sections:
        lines += [
            f"## Background load: {what} (started {started})",
            "",
            "| figure | goal | peer | stoker | ratio | met? | load average |",
            "|---|---|---|---|---|---|---|",
            *[f"| {' | '.join(row)} |" for row in rows],
            "",
        ]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    lib.log(f"wrote {os.path.relpath(args.out, lib.SOURCE_DIR)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
