"""P3: the image pipeline vs PyTorch DataLoader + torchvision, and the decode ceiling.

The measurement is bench/tools/p3_bench.py (which also runs the DataLoader
side); this suite runs it as part of `make bench` and writes bench/results/p3.md.
"""
import os

import lib


def run(ctx):
    script = os.path.join(lib.SOURCE_DIR, "bench", "tools", "p3_bench.py")
    out = os.path.join(ctx.results_dir, "p3.md")
    os.makedirs(ctx.results_dir, exist_ok=True)
    lib.run(["/usr/bin/python3", script, "--build", ctx.build_dir, "--out", out])
    lib.log(f"wrote {os.path.relpath(out, lib.SOURCE_DIR)}")
