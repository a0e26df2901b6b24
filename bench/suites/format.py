"""Random-order minibatches of 256 samples of ~100 KiB.

The same 3,000 random 100 KiB samples exist three ways: as original files (a folder tree), as
stoker shards on local disk, and as stoker shards plus the original files on the Swift S3 server.
Rows, in samples/s:
  stoker batched reads   Dataset::ReadSamples per minibatch (grouped by shard, coalesced)
  stoker one read/sample the same samples, one read each, 16 in flight
  original files         one open+read per file, in random order (local disk; s3fs for S3)
  s3fs, 16 threads       the same files read by 16 threads through the s3fs mount
Each run reads BATCHES minibatches; file rows read the same number of randomly chosen files (the
same seed, so statistically the same work, though not the very same samples). Local rows are warm
(page cache); S3 rows are warm on the server and cold in s3fs (a fresh mount per run).
"""
import concurrent.futures
import json
import os
import random
import subprocess

import lib
from object_store import S3fsMount  # noqa: E402  (bench/suites is on sys.path via run.py)

SAMPLES = 3000
SAMPLE_BYTES = 100 << 10
CLASSES = 10
BATCH = 256
BATCHES = 4


def run(ctx):
    env = ctx.s3()
    tree = os.path.join(ctx.tmp, "fmt-tree")
    lib.make_sample_tree(tree, SAMPLES, SAMPLE_BYTES, CLASSES)
    files = sorted(os.path.relpath(os.path.join(d, f), tree)
                   for d, _, fs in os.walk(tree) for f in fs)
    local_ds = os.path.join(ctx.tmp, "fmt-ds")
    lib.log("converting to local shards and to S3; uploading the original files")
    lib.run([ctx.stoker, "convert", tree, local_ds], env=env)
    ctx.aws(env, "s3", "mb", "s3://benchfmt")
    lib.run([ctx.stoker, "convert", tree, "s3://benchfmt/ds"], env=env)
    ctx.aws(env, "s3", "cp", "--recursive", "--quiet", tree, "s3://benchfmt/files")
    tool = os.path.join(ctx.build_dir, "stoker-bench-samples")
    n = BATCH * BATCHES
    last = {}

    def stoker(url, mode):
        def action():
            out = subprocess.run([tool, url, mode, str(BATCHES), str(BATCH), "7"], env=env,
                                 check=True, capture_output=True, text=True).stdout
            last[(url, mode)] = json.loads(out)
        return action

    chosen = random.Random(7).sample(files, n)

    def read_files(root, threads=1):
        def read(name):
            with open(os.path.join(root, name), "rb") as f:
                return len(f.read())
        if threads == 1:
            got = [read(name) for name in chosen]
        else:
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                got = list(pool.map(read, chosen))
        if got != [SAMPLE_BYTES] * n:
            raise RuntimeError("short file read")

    def s3fs_files(threads):
        def action():
            with S3fsMount(ctx, env, "benchfmt") as mount:
                read_files(os.path.join(mount, "files"), threads)
        return action

    s3 = "s3://benchfmt/ds/"
    rows = []
    for name, action, marker in [
        ("local: stoker batched reads", stoker(local_ds + "/", "batched"), None),
        ("local: stoker one read per sample", stoker(local_ds + "/", "per-sample"), None),
        ("local: original files one by one", lambda: read_files(tree), None),
        ("S3: stoker batched reads", stoker(s3, "batched"), ctx.s3_marker),
        ("S3: stoker one read per sample", stoker(s3, "per-sample"), ctx.s3_marker),
        ("S3: s3fs, original files one by one", s3fs_files(1), ctx.s3_marker),
        ("S3: s3fs, original files, 16 threads", s3fs_files(16), ctx.s3_marker),
    ]:
        action()  # warm-up
        rows.append(lib.measure(name, action, n * SAMPLE_BYTES, ctx.repeat, marker))

    def sps(m):
        return n / m.median

    by_name = {m.name: m for m in rows}
    s3_batched = by_name["S3: stoker batched reads"]
    lines = [
        "# Shards and batched reads",
        "",
        lib.machine_line(),
        f"{SAMPLES} samples of {SAMPLE_BYTES >> 10} KiB (random bytes); each run reads {BATCHES} "
        f"random-order minibatches of {BATCH}. Medians of {ctx.repeat} runs after a warm-up run; "
        "server CPU is the Swift server's during the run.",
        "",
        "| reader | samples/s | MB/s | server CPU s |",
        "|---|---|---|---|",
        *[f"| {m.name} | {sps(m):.0f} | {m.mb_per_s:.0f} | "
          f"{m.cpu_median:.2f} |" for m in rows],
        "",
        f"- S3: stoker batched / s3fs files one by one: "
        f"**{sps(s3_batched) / sps(by_name['S3: s3fs, original files one by one']):.1f}x** (goal >= 5)",
        f"- S3: stoker batched / s3fs with 16 threads: "
        f"{sps(s3_batched) / sps(by_name['S3: s3fs, original files, 16 threads']):.1f}x",
        f"- S3: stoker batched / one read per sample: "
        f"{sps(s3_batched) / sps(by_name['S3: stoker one read per sample']):.1f}x",
        f"- S3 batched, last run: `{json.dumps(last.get((s3, 'batched')))}` (requests: HTTP requests "
        "after coalescing; with the default S3 coalescing limits, holes up to 2.7 MB are read "
        "through, so sparse batches read more bytes than they deliver)",
        "",
    ]
    ctx.write_result("format", "\n".join(lines))
