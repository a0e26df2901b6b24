"""P7, coordinated reads: 4 consumers of one job, as the ranks of a synchronous training job.

Data: 20,000 samples whose lengths are log-normal (median 256 bytes, sigma 0.9, cut at 4,096),
bucketed by length (`cast` to uint8, then `bucket_by_length` with boundaries at the length
quantiles 0.25/0.5/0.75/0.9, 32 samples a batch). A step's time is taken as proportional to its
batch's padded length (the longest sample), and the consumers step together: each step lasts as
long as its slowest consumer's, and every other consumer waits the difference.

- coordinated:   `num_consumers=4`: every round gives each consumer one batch from one worker and
                 one bucket (docs/protocol.md, "Coordinated reads").
- uncoordinated: the same pipeline as one shared job (`job_name`), first come first served, as
                 without coordinated reads; only the steps that every consumer has are counted
                 (the extra batches of some consumers are what hangs DDP at the end of an epoch).

Each consumer is its own process reading through the real service (a dispatcher and 2 workers);
the step times are computed from the padded lengths it received, in its delivery order (nothing is
slept). Reported: the total time the consumers wait for the slowest one per epoch, and the epoch's
time (sum of the step times), in units of one byte of padded length; goal: waiting >= 2x less with
coordination.
"""
import json
import os
import random
import statistics
import subprocess

import lib
import service  # free_port and the cluster helpers of the service suite

SAMPLES = 20000
BATCH = 32
CONSUMERS = 4
RUNS = 3

CONSUMER = r"""
import json, sys
import stoker
spec, address, out, mode, index = sys.argv[1:6]
pipe = stoker.Pipeline.from_spec(json.load(open(spec)))
if mode == "coordinated":
    served = pipe.distribute(dispatcher=address, job_name="p7-" + out.split("-")[-2],
                             num_consumers=4, consumer_index=int(index))
else:
    served = pipe.distribute(dispatcher=address, job_name="p7-" + out.split("-")[-2])
lengths = [int(b["tokens"].shape[1]) for b in served]
served.close()
json.dump(lengths, open(out, "w"))
"""


def make_dataset(ctx):
    rng = random.Random(7)
    tree = os.path.join(ctx.tmp, "p7-tree", "c")
    os.makedirs(tree)
    lengths = []
    for i in range(SAMPLES):
        n = min(4096, max(8, int(rng.lognormvariate(5.545, 0.9))))  # median e^5.545 = 256
        lengths.append(n)
        with open(os.path.join(tree, f"{i:06d}.tok"), "wb") as f:
            f.write(bytes(rng.getrandbits(8) for _ in range(16)) * (n // 16) + b"x" * (n % 16))
    ds = os.path.join(ctx.tmp, "p7-ds")
    lib.run([ctx.stoker, "convert", os.path.dirname(tree), ds])
    lengths.sort()
    boundaries = sorted({lengths[int(q * SAMPLES)] for q in (0.25, 0.5, 0.75, 0.9)})
    return ds, boundaries


def wait_and_epoch(per_consumer):
    steps = min(len(x) for x in per_consumer)
    wait = epoch = 0
    for k in range(steps):
        t = [x[k] for x in per_consumer]
        epoch += max(t)
        wait += sum(max(t) - v for v in t)
    return wait, epoch, steps


def run(ctx):
    ds, boundaries = make_dataset(ctx)
    spec = {"source": {"dataset": ds + "/"},
            "ops": [{"op": "shuffle", "seed": 11},
                    {"op": "cast", "field": "tok", "to": "uint8"},
                    {"op": "map_field", "rename": {"tok": "tokens"}},
                    {"op": "bucket_by_length", "field": "tokens", "boundaries": boundaries,
                     "batch_sizes": [BATCH] * (len(boundaries) + 1), "drop_remainder": True}]}
    spec_path = os.path.join(ctx.tmp, "p7-spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    script = os.path.join(ctx.tmp, "p7-consumer.py")
    with open(script, "w") as f:
        f.write(CONSUMER)
    env = dict(os.environ, PYTHONPATH=os.path.join(ctx.build_dir, "python"))
    results = {"coordinated": [], "uncoordinated": []}
    with service.Cluster(ctx, workers=2) as cluster:
        for run_index in range(RUNS):
            for mode in results:
                outs = [os.path.join(ctx.tmp, f"p7-{mode}-{run_index}-{i}.json")
                        for i in range(CONSUMERS)]
                procs = [subprocess.Popen(["/usr/bin/python3", script,
                                           spec_path, cluster.address, outs[i], mode, str(i)],
                                          env=env) for i in range(CONSUMERS)]
                for p in procs:
                    if p.wait(timeout=600) != 0:
                        raise RuntimeError(f"P7 {mode} consumer failed")
                per_consumer = [json.load(open(o)) for o in outs]
                results[mode].append(wait_and_epoch(per_consumer) +
                                     (sum(len(x) for x in per_consumer),))
                lib.log(f"P7 {mode} run {run_index}: wait, epoch, steps, batches = "
                        f"{results[mode][-1]}")

    def med(mode, i):
        return statistics.median(r[i] for r in results[mode])

    ratio = med("uncoordinated", 0) / max(1, med("coordinated", 0))
    # Per common step: the uncoordinated consumers share fewer common steps (the rest of their
    # batches are the ones that would hang DDP), so totals alone would flatter them.
    per_step = {m: statistics.median(r[0] / max(1, r[2]) for r in results[m]) for m in results}
    step_time = {m: statistics.median(r[1] / max(1, r[2]) for r in results[m]) for m in results}
    step_ratio = per_step["uncoordinated"] / max(1e-9, per_step["coordinated"])
    time_ratio = step_time["uncoordinated"] / max(1e-9, step_time["coordinated"])
    dropped = 1 - med("coordinated", 3) / max(1, med("uncoordinated", 3))
    lines = [
        "# P7: coordinated reads",
        "",
        lib.machine_line(),
        "",
        __doc__.strip(),
        "",
        f"Boundaries {boundaries}; median of {RUNS} runs; times in bytes of padded length.",
        "",
        "| mode | waiting for the slowest (sum over consumers and steps) | per common step | step"
        " time per common step | common steps | batches delivered (all consumers) |",
        "|---|---|---|---|---|---|",
    ]
    for mode in ("uncoordinated", "coordinated"):
        lines.append(f"| {mode} | {med(mode, 0):,.0f} | {per_step[mode]:,.0f} | "
                     f"{step_time[mode]:,.0f} | {med(mode, 2):,.0f} | {med(mode, 3):,.0f} |")
    lines += ["",
              f"**Waiting: {ratio:.1f}x less in total, {step_ratio:.1f}x less per step, with "
              f"coordinated reads** (goal >= 2x: {'met' if min(ratio, step_ratio) >= 2 else 'missed'});"
              f" a step takes {time_ratio:.2f}x less time.",
              "",
              f"The price: with `partial_round: drop`, each split's incomplete round of each bucket"
              f" is dropped: {dropped:.0%} of the batches here (splits are ~100 ms of work, so a few"
              f" rounds each). `pad` delivers them instead, repeating some batches.",
              ""]
    ctx.write_result("coordinated", "\n".join(lines))
