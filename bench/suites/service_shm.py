"""P4 with the shared-memory hand-off (docs/protocol.md, "Shared memory"), all as real processes on
127.0.0.1, side by side in one run: 1 MiB elements in-process (`stoker run`), through one local
worker over TCP (`stoker consume --no-shm`) and through the same kind of worker with shared memory
(`stoker consume`, the default on one host). Goals: shared memory >= 0.85x the in-process
throughput (issue 25), and the consumer (the trainer's side) <= 0.1 CPU-seconds per GB. Besides
the consumer's CPU, the CPU of all processes per GB and the server side's minor page faults (each
page of the segment the worker touches for the first time is one).

The helpers (datasets, fresh clusters, measured runs) are bench/suites/service.py's; the rest of
P4 (1 KiB and JPEG elements) is there.
"""
import os
import re
import shutil
import subprocess

import lib
import service

ELEMENTS = 2000  # of 1 MiB: 2 GB a run
SHORT = 200      # the --max-elements run of the steady-state difference
SHM_LINE = r"shared memory: (\d+) elements"


def consume(ctx, cluster, spec, max_elements, shm):
    cmd = [ctx.stoker, "consume", "--dispatcher", cluster.address, spec]
    if not shm:
        cmd.append("--no-shm")
    if max_elements:
        cmd += ["--max-elements", str(max_elements)]
    try:
        return service.run_measured(cmd, service.CONSUME_LINE)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"{' '.join(cmd)} failed: {(e.stderr or '')[-3000:]}") from None


def minor_faults(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])  # field 10, minflt


def through(ctx, spec, max_elements, shm):
    with service.Cluster(ctx) as cluster:
        before = cluster.cpu_seconds()
        faults = sum(minor_faults(p.pid) for p in cluster.procs)
        r = consume(ctx, cluster, spec, max_elements, shm)
        r.server_cpu = cluster.cpu_seconds() - before
        r.server_faults = sum(minor_faults(p.pid) for p in cluster.procs) - faults
    return r


def shm_elements(ctx, spec):
    """How many elements of a full run came through shared memory (one extra run, not timed)."""
    with service.Cluster(ctx) as cluster:
        err = lib.run([ctx.stoker, "consume", "--dispatcher", cluster.address, spec]).stderr
    m = re.search(SHM_LINE, err)
    return int(m.group(1)) if m else 0


def run(ctx):
    load_before = os.getloadavg()[0]
    spec = service.make_raw_dataset(ctx, "shm-1mib", ELEMENTS, 1 << 20)
    modes = ("in-process", "TCP", "shared memory")
    runs = {m: [] for m in modes}  # (full, short) per repeat
    for _ in range(ctx.repeat):
        # Side by side: each repeat runs the three within seconds of each other.
        runs["in-process"].append((service.in_process(ctx, spec),
                                   service.in_process(ctx, spec, SHORT)))
        runs["TCP"].append((through(ctx, spec, None, False), through(ctx, spec, SHORT, False)))
        runs["shared memory"].append((through(ctx, spec, None, True),
                                      through(ctx, spec, SHORT, True)))
    via_shm = shm_elements(ctx, spec)
    shutil.rmtree(os.path.join(ctx.tmp, "shm-1mib-ds"))
    load_after = os.getloadavg()[0]

    rows = {}
    for m in modes:
        fulls = [f for f, _ in runs[m]]
        for f, _ in runs[m]:
            if f.elements != ELEMENTS:
                raise RuntimeError(f"{m}: {f.elements} elements, expected {ELEMENTS}")
        gb = fulls[0].mb / 1000
        rows[m] = {
            "mb_s": service.median([f.mb / f.seconds for f in fulls]),
            "mb_s_steady": service.median([service.steady_rate(f, s, "mb") for f, s in runs[m]]),
            "wall": service.median([f.seconds for f in fulls]),
            "cpu": service.median([f.cpu for f in fulls]),
            "cpu_gb": service.median([f.cpu / gb for f in fulls]),
            # The consumer's CPU per GB once running: the difference of a full and a short run.
            "cpu_gb_steady": service.median([(f.cpu - s.cpu) / max(1e-9, (f.mb - s.mb) / 1000)
                                             for f, s in runs[m]]),
            "server_cpu": service.median([getattr(f, "server_cpu", 0.0) for f in fulls]),
            "all_cpu_gb": service.median([(f.cpu + getattr(f, "server_cpu", 0.0)) / gb
                                          for f in fulls]),
            "server_faults": service.median([getattr(f, "server_faults", 0) for f in fulls]),
        }
    # Ratios per repeat, then their median (a repeat's runs follow each other within seconds).
    ratio = {}
    for m in ("TCP", "shared memory"):
        ratio[m] = {
            "e2e": service.median([f.mb / f.seconds / (lf.mb / lf.seconds) for (f, _), (lf, _) in
                                   zip(runs[m], runs["in-process"])]),
            "steady": service.median([service.steady_rate(f, s, "mb") /
                                      service.steady_rate(lf, ls, "mb") for (f, s), (lf, ls) in
                                      zip(runs[m], runs["in-process"])]),
        }
    shm, tcp, local = rows["shared memory"], rows["TCP"], rows["in-process"]
    lines = [
        "# The service: P4 with the shared-memory hand-off",
        "",
        lib.machine_line(),
        f"Load average {load_before:.1f} before the suite, {load_after:.1f} after (the suite's "
        "own processes count in the second). The machine is shared: wall-clock rates are a share "
        "of it and vary from run to run; CPU seconds are the stable figure. Medians of "
        f"{ctx.repeat} runs (`bench/suites/service_shm.py`; `/usr/bin/python3 bench/run.py "
        "--build BUILD service_shm`).",
        "",
        f"{ELEMENTS} elements of 1 MiB (a local stoker dataset, the class field dropped: no "
        "decode), in one repeat after the other: `stoker run SPEC` (in-process), then `stoker "
        "consume --no-shm` (TCP) and `stoker consume` (shared memory), each against a fresh "
        "`stoker dispatcher` and one `stoker worker` (default settings: a 256 MiB segment per "
        "consumer) on this host. *End to end* is MB over the process's wall time (start-up "
        f"included); *steady* is the difference of the full run and a `--max-elements {SHORT}` "
        "run. *Consumer CPU s/GB* is the consume (or run) process's user + system CPU seconds "
        "over the GB it received; *steady* by the same difference (start-up, connection and job "
        "set-up taken out).",
        "",
        "| path | MB/s end to end | MB/s steady | / in-process, end to end | steady | wall s | "
        "consumer CPU s | consumer CPU s/GB | steady | worker + dispatcher CPU s | "
        "all processes CPU s/GB | worker + dispatcher minor faults |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in modes:
        r = rows[m]
        rel = ratio.get(m, {"e2e": 1.0, "steady": 1.0})
        lines.append(
            f"| {m} | {r['mb_s']:.0f} | {r['mb_s_steady']:.0f} | {rel['e2e']:.2f} | "
            f"{rel['steady']:.2f} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['cpu_gb']:.3f} | "
            f"{r['cpu_gb_steady']:.3f} | "
            f"{'-' if m == 'in-process' else format(r['server_cpu'], '.2f')} | "
            f"{r['all_cpu_gb']:.3f} | "
            f"{'-' if m == 'in-process' else format(int(r['server_faults']), ',')} |")
    met_rate = ratio["shared memory"]["e2e"] >= 0.85  # as bench/scoreboard.py judges P4
    met_cpu = shm["cpu_gb"] <= 0.1
    lines += [
        "",
        f"- Elements that came through shared memory in a full run: {via_shm} of {ELEMENTS} (the "
        "rest, if any, went inline because the segment was full).",
        f"- Throughput, shared memory / in-process: **{ratio['shared memory']['e2e']:.2f}** end to "
        f"end, **{ratio['shared memory']['steady']:.2f}** steady (TCP: "
        f"{ratio['TCP']['e2e']:.2f} / {ratio['TCP']['steady']:.2f}). Goal >= 0.85: "
        f"**{'met' if met_rate else 'missed'}** (end to end, start-up included, as the scoreboard "
        "judges it).",
        f"- The trainer's side: **{shm['cpu_gb']:.3f} CPU-s per GB** with shared memory end to "
        f"end ({shm['cpu_gb_steady']:.3f} steady), against {tcp['cpu_gb']:.3f} "
        f"({tcp['cpu_gb_steady']:.3f}) over TCP and {local['cpu_gb']:.3f} for the whole "
        f"in-process pipeline. Goal <= 0.1: **{'met' if met_cpu else 'missed'}** (end to end).",
        "- Where the CPU goes: over TCP the consumer receives every byte through the socket (a "
        "kernel copy) and parses the reply (a copy); with shared memory it maps the worker's "
        "segment once and decodes each element in place, so its cost is the requests and the "
        "element headers, not the bytes. The worker still copies each payload once, into the "
        "segment (its CPU column).",
    ]
    if not met_rate:
        lines.append(
            "- Why the throughput goal can miss here (`perf record` of a worker serving these "
            "elements on the idle machine, 2026-12-04): both paths read the shards alike, as "
            "slices of a mapping of the page cache, and check each record's CRC-32C on one "
            "thread; that check is 49-58% of the worker's samples, as it is most of the "
            "in-process CPU. Its bytes are touched for the first time through the mapping: on "
            "this VM CRC-32C runs at 4.9-5.1 GB/s over freshly mapped page-cache pages and at "
            "13.7-13.9 GB/s once they are mapped (`MADV_POPULATE_READ`, `MADV_HUGEPAGE` or a "
            "2 MiB-aligned mapping changed nothing; reading with a copy instead, "
            "`STOKER_LOCAL_MMAP=off`, made both paths about twice as slow). The service adds the "
            "worker's copy of each payload into the segment (a memmove on a gRPC thread, 23-26% "
            "of the worker's samples; the segment is shmem in 4 KiB pages, shmem huge pages being "
            "off here), the requests and the consumer: the all-processes CPU per GB above, on 2 "
            "cores that the worker and the consumer share. With two requests in flight (the "
            "default) two of those copies compete with the producing thread: one request in "
            "flight (`--requests-per-worker 1`) took 0.72-0.73 s against 0.77-0.84 s (3 runs "
            "each; 4 in flight: 0.84-0.95 s). What would reach the goal is producing the payload "
            "in the segment instead of copying it there (the read landing in memory the consumer "
            "maps), which is not built. Read the ratios together with the load average above; "
            "the CPU columns are the stable figures.")
    ctx.write_result("service_shm", "\n".join(lines) + "\n")
