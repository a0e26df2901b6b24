"""P10, autoscaling, all as real processes on 127.0.0.1 (docs/operations.md, "Autoscaler").

The workers spend 30 ms on each element (the test plugin's `sleep` op, one pipeline thread: about
33 elements/s a worker, a cost that takes no CPU, so the shared machine's load does not change it);
the consumer's trainer spends 12 ms on each (`stoker consume --step-ms 12`: about 83 elements/s),
so it needs ceil(1.1 * 83 / 33) = 3 workers. Two set-ups read the same job:

  autoscaled  `stoker dispatcher --autoscale local --min-workers 1 --max-workers 6` (1 s interval),
              two jobs of the same pipeline, the second once the pool is back at 1 worker:
              starts with 1 worker and must reach the 3 needed within 10 worker heartbeat intervals
              (500 ms) of the consumer's start, and change at most once more while it runs (a
              job of a pipeline never read starts with the standby workers, a guess, and its
              first measured decision comes at the consumer's first look, docs/operations.md);
              then a light trainer's job (1 worker enough) of another pipeline, to show what
              the guess costs when it is too much;
  fixed pool  a dispatcher and 6 workers started beforehand.

Reported per set-up (medians of RUNS runs): the time until 3 workers are registered, the changes of
the target after that, the trainer's stall ratio over the whole run (its wait / (wait + compute)
as `stoker consume` prints it) and in steady state (the dispatcher's stall ratio gauge averaged
once 3 workers run), and the worker-seconds while the consumer ran (registered workers sampled
every 100 ms). Goals: stall ratio <= 1.1x the fixed pool's, worker-seconds <= 0.6x.
"""
import json
import os
import re
import signal
import statistics
import subprocess
import time
import urllib.request

import lib

RUNS = 5  # the pool stalls ~0.1 s a run: one hiccup of 20 ms moves a run 20%
SAMPLES = 1800
ELEMENT_MS = 30
STEP_MS = 12
NEEDED = 3
FIXED_WORKERS = 6
HEARTBEAT_MS = 500
INTERVAL_MS = 1000
# A light trainer (45 ms a step, about 22 elements/s: 1 worker is enough), a pipeline never read:
# its job starts with the standby workers (a guess) and the autoscaler must go back to 1.
LIGHT_SAMPLES = 300
LIGHT_STEP_MS = 45


def metric(port, name):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[-1])
    except OSError:
        pass
    return None


def wait_for(predicate, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError(f"P10: timed out waiting for {what}")


def start_dispatcher(ctx, tag, extra):
    out = os.path.join(ctx.tmp, f"p10-{tag}-dispatcher.out")
    err = open(os.path.join(ctx.tmp, f"p10-{tag}-dispatcher.err"), "w")
    p = subprocess.Popen([ctx.stoker, "dispatcher", "--port", "0", "--http-port", "0",
                          "--autoscale-interval-ms", str(INTERVAL_MS), *extra],
                         stdout=open(out, "w"), stderr=err)
    m = None

    def ready():
        nonlocal m
        m = re.search(r"serving on port (\d+), /healthz on port (\d+)", open(out).read())
        return m

    wait_for(ready, "the dispatcher")
    return p, f"127.0.0.1:{m.group(1)}", int(m.group(2))


def worker_flags(plugin_dir):
    return ["--threads", "1", "--plugin-dir", plugin_dir, "--heartbeat-ms", str(HEARTBEAT_MS)]


def consume(ctx, spec, address, http, tag, samples_wanted=SAMPLES, step_ms=STEP_MS):
    """One job read by `stoker consume` to its end; its figures."""
    err_path = os.path.join(ctx.tmp, f"p10-{tag}-consume.err")
    start = time.time()
    consumer = subprocess.Popen(
        [ctx.stoker, "consume", "--dispatcher", address, spec, "--no-deterministic",
         "--step-ms", str(step_ms)], stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    samples = []  # (seconds, registered workers, target, stall gauge)
    while consumer.poll() is None:
        samples.append((time.time() - start, metric(http, "stoker_dispatcher_workers"),
                        metric(http, "stoker_dispatcher_target_workers"),
                        metric(http, "stoker_dispatcher_stall_ratio")))
        time.sleep(0.1)
    took = time.time() - start
    if consumer.wait() != 0:
        raise RuntimeError(f"P10 consumer failed: {open(err_path).read()}")
    err = open(err_path).read()
    m = re.search(r"consumed (\d+) elements.*waited ([0-9.]+) s for data, computed ([0-9.]+) s",
                  err)
    if not m or int(m.group(1)) != samples_wanted:
        raise RuntimeError(f"P10: unexpected consumer output: {err}")
    wait, compute = float(m.group(2)), float(m.group(3))
    # Worker-seconds: registered workers integrated over the consumer's run.
    worker_seconds = 0.0
    for (t0, n, _, _), (t1, _, _, _) in zip(samples, samples[1:] + [(took, 0, 0, 0)]):
        worker_seconds += (n or 0) * (t1 - t0)
    reached = next((t for t, n, _, _ in samples if (n or 0) >= NEEDED), None)
    targets = [tg for _, _, tg, _ in samples if tg is not None]
    settled = next((i for i, tg in enumerate(targets) if tg >= NEEDED), None)
    changes = (sum(1 for a, b in zip(targets[settled:], targets[settled + 1:]) if a != b)
               if settled is not None else None)
    steady = [s for t, n, _, s in samples
              if reached is not None and t >= reached + 2 * INTERVAL_MS / 1000 and s is not None]
    # Above one worker: what a guess that was too much costs a light trainer.
    back_at_one = next((t for i, (t, n, _, _) in enumerate(samples)
                        if n == 1 and any((m or 0) > 1 for _, m, _, _ in samples[:i])), None)
    result = {"seconds": took, "stall": wait / (wait + compute), "worker_seconds": worker_seconds,
              "reached": reached, "changes": changes,
              "steady_stall": statistics.mean(steady) if steady else None,
              "max_target": max(targets) if targets else None,
              "extra_worker_seconds": worker_seconds - took, "back_at_one": back_at_one}
    lib.log(f"P10 {tag}: {json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in result.items()})}")
    return result


def one_run(ctx, spec, light_spec, plugin_dir, autoscaled, index):
    """Fixed: one job; autoscaled: one job, then (back at 1 worker) the same pipeline again, then
    a light trainer's job of another pipeline."""
    tag = f"{'auto' if autoscaled else 'fixed'}{index}"
    workers = []
    if autoscaled:
        extra = ["--autoscale", "local", "--min-workers", "1", "--max-workers", str(FIXED_WORKERS)]
        extra += [f"--worker-flag={f}" for f in worker_flags(plugin_dir)]
    else:
        extra = []
    dispatcher, address, http = start_dispatcher(ctx, tag, extra)
    try:
        if not autoscaled:
            for _ in range(FIXED_WORKERS):
                workers.append(subprocess.Popen(
                    [ctx.stoker, "worker", "--dispatcher", address, *worker_flags(plugin_dir)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        want = 1 if autoscaled else FIXED_WORKERS
        wait_for(lambda: metric(http, "stoker_dispatcher_workers") == want, f"{want} workers")
        results = [consume(ctx, spec, address, http, tag)]
        if autoscaled:
            wait_for(lambda: metric(http, "stoker_dispatcher_target_workers") == 1 and
                     metric(http, "stoker_dispatcher_workers") == 1, "the scale-down to 1 worker")
            results.append(consume(ctx, spec, address, http, tag + "-rerun"))
            wait_for(lambda: metric(http, "stoker_dispatcher_target_workers") == 1 and
                     metric(http, "stoker_dispatcher_workers") == 1, "the scale-down to 1 worker")
            time.sleep(1.5)  # the woken standby workers refilled (standby_refill_delay, 1 s)
            results.append(consume(ctx, light_spec, address, http, tag + "-light", LIGHT_SAMPLES,
                                   LIGHT_STEP_MS))
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(timeout=30)
        dispatcher.send_signal(signal.SIGTERM)
        dispatcher.wait(timeout=60)
    with open(os.path.join(ctx.tmp, f"p10-{tag}-dispatcher.err")) as f:
        for decision in re.findall(r"autoscaler: \d+ -> \d+ workers .*", f.read()):
            lib.log(f"P10 {tag}: {decision}")
    return results


def med(results, key):
    values = [r[key] for r in results if r[key] is not None]
    return statistics.median(values) if values else None


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def run(ctx):
    plugin = os.path.join(ctx.build_dir, "plugins", "libstoker_sleep.so")
    if not os.path.exists(plugin):
        raise RuntimeError(f"P10 needs {plugin} (target stoker_sleep_plugin)")
    spec = os.path.join(ctx.tmp, "p10-spec.json")
    with open(spec, "w") as f:
        json.dump({"plugins": [plugin], "source": {"range": SAMPLES},
                   "ops": [{"op": "sleep", "ms": ELEMENT_MS}]}, f)
    load_before = os.getloadavg()[0]
    light_spec = os.path.join(ctx.tmp, "p10-light-spec.json")
    with open(light_spec, "w") as f:
        json.dump({"plugins": [plugin], "source": {"range": LIGHT_SAMPLES},
                   "ops": [{"op": "sleep", "ms": ELEMENT_MS}]}, f)
    results = {"auto": [], "rerun": [], "light": [], "fixed": []}
    for i in range(RUNS):
        first, rerun, light = one_run(ctx, spec, light_spec, os.path.dirname(plugin), True, i)
        results["auto"].append(first)
        results["rerun"].append(rerun)
        results["light"].append(light)
        results["fixed"].extend(one_run(ctx, spec, light_spec, os.path.dirname(plugin), False, i))
    load_after = os.getloadavg()[0]
    auto, rerun, light, fixed = (results["auto"], results["rerun"], results["light"],
                                 results["fixed"])
    reach = med(auto, "reached")
    reach_hb = reach / (HEARTBEAT_MS / 1000) if reach is not None else None
    changes = max((r["changes"] for r in auto if r["changes"] is not None), default=None)
    stall_ratio = med(auto, "stall") / med(fixed, "stall") if med(fixed, "stall") else None
    rerun_ratio = med(rerun, "stall") / med(fixed, "stall") if med(fixed, "stall") else None
    steady_ratio = (med(auto, "steady_stall") / med(fixed, "steady_stall")
                    if med(fixed, "steady_stall") else None)
    ws_ratio = med(auto, "worker_seconds") / med(fixed, "worker_seconds")

    def verdict(ok):
        return "met" if ok else "not met"

    rows = [
        "| set-up | wall s | trainer stall ratio (whole run) | stall ratio in steady state | "
        "worker-seconds | 3 workers registered after (s) | target changes after reaching 3 (most in "
        "any run) | "
        "highest target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, rs in (("autoscaled, 1 .. 6 from 1", auto),
                     ("autoscaled, the same pipeline again (back at 1 worker)", rerun),
                     (f"fixed pool of {FIXED_WORKERS}", fixed)):
        rows.append(f"| {name} | {fmt(med(rs, 'seconds'), 1)} | {fmt(med(rs, 'stall'), 3)} | "
                    f"{fmt(med(rs, 'steady_stall'), 3)} | {fmt(med(rs, 'worker_seconds'), 1)} | "
                    f"{fmt(med(rs, 'reached'), 1)} | "
                    f"{'-' if rs is fixed else max((r['changes'] or 0) for r in rs)} | "
                    f"{fmt(med(rs, 'max_target'), 0)} |")
    per_run = "\n".join(
        f"- {kind} run {i}: " + ", ".join(
            f"{k} {fmt(v, 3) if isinstance(v, float) else v}" for k, v in r.items())
        for kind in ("auto", "rerun", "light", "fixed") for i, r in enumerate(results[kind]))
    text = f"""# P10: autoscaling (bench/suites/autoscale.py)

{lib.machine_line()} Load average (1 min) {load_before:.1f} before and {load_after:.1f} after the
runs: other engineers were building on this machine meanwhile. The per-element costs are sleeps
(no CPU), so the worker throughput does not depend on that load; the processes' start-up does.

Workers: 30 ms per element, one pipeline thread (about 33 elements/s each); trainer: 12 ms per
element (about 83 elements/s), {SAMPLES} elements: 3 workers needed. Autoscaler interval
{INTERVAL_MS} ms, worker heartbeat {HEARTBEAT_MS} ms. Medians of {RUNS} runs.

{chr(10).join(rows)}

| goal | measured | verdict |
| --- | --- | --- |
| reach the needed 3 workers within 10 heartbeat intervals | {fmt(reach_hb, 1)} intervals of {HEARTBEAT_MS} ms ({fmt(reach, 1)} s after the consumer started) | {verdict(reach_hb is not None and reach_hb <= 10)} |
| at most 1 change after settling | {changes} (most in any run) | {verdict(changes is not None and changes <= 1)} |
| trainer stall ratio <= 1.1x the fixed pool's (whole run) | {fmt(stall_ratio, 2)}x | {verdict(stall_ratio is not None and stall_ratio <= 1.1)} |
| the same, a second job of the same pipeline (its need remembered) | {fmt(rerun_ratio, 2)}x | {verdict(rerun_ratio is not None and rerun_ratio <= 1.1)} |
| the same once 3 workers run (steady state) | {fmt(steady_ratio, 2)}x | {verdict(steady_ratio is not None and steady_ratio <= 1.1)} |
| worker-seconds <= 0.6x the fixed pool's | {ws_ratio:.2f}x | {verdict(ws_ratio <= 0.6)} |

The first job reads a pipeline the dispatcher has not seen: as its consumer registers, before
its first element, the autoscaler wakes the dispatcher's 2 standby workers (processes started with
the dispatcher, their binary loaded and servers up, not registered), a guess
(docs/operations.md, "Autoscaler"). They register about 5 ms later, and the consumer, whose
heartbeat is a long poll held until the job's workers change, reads from them at once, so all 3
deliver from the start. This trainer needs 3, which is 1 + the 2 standby workers: a pipeline that
needs more starts with 3 and grows from the consumer's first look (its third element) on, with no
cool-down after the guess. Before the guess (until stop 37) the first decision came at that first
look, 60 ms after the first element, and the new workers delivered one element's time (30 ms)
after it: the trainer got a third of what it asked for until then and the whole-run ratio was
1.70x. The second job of the same pipeline on the same dispatcher (started once the pool is back
at 1 worker) starts from the need the dispatcher remembered from the first. The steady-state
column compares the set-ups once 3 workers run; both stall about 0.1-0.2% of the time there, so
its ratio moves with noise of a few ms.

What a guess costs when it was too much: a light trainer (45 ms a step, about 22 elements/s, 1
worker enough) reads {LIGHT_SAMPLES} elements of another pipeline on the autoscaled dispatcher,
once the pool is back at 1 worker and the standby workers are refilled. Its job also starts with 3
workers, and the first decision that knows the rule (the workers' throughput comes with their
heartbeats) while the trainer does not stall goes down to it at once.

| set-up | wall s | trainer stall ratio | worker-seconds | of them above 1 worker | back at 1 worker after (s) | highest target |
| --- | --- | --- | --- | --- | --- | --- |
| autoscaled, light trainer, a pipeline never read | {fmt(med(light, 'seconds'), 1)} | {fmt(med(light, 'stall'), 3)} | {fmt(med(light, 'worker_seconds'), 1)} | {fmt(med(light, 'extra_worker_seconds'), 1)} | {fmt(med(light, 'back_at_one'), 1)} | {fmt(med(light, 'max_target'), 0)} |

A change after settling, where there is one, comes at the job's end: once every split is handed
out the workers idle while the trainer reads what they buffered, and after 3 idle intervals the
autoscaler releases a worker (3 -> 2) before the trainer is done.

Per run:

{per_run}
"""
    ctx.write_result("autoscale", text)
