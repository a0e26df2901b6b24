"""The cost of the Python iterator.

One JPEG dataset (make_test_images, converted to local shards) and one image pipeline (decode,
random_resized_crop 64, flip, normalize, batch 64, prefetch). Rows, in batches/s:
  C++  `stoker run SPEC --threads T` (its own timer, from the first GetNext to the end)
  Python  `for batch in pipe.iterator(threads=T)` in this process, the numpy arrays touched
          (shape read) but not copied; timed over the same span
Both run EPOCHS epochs per measurement; the ratio Python / C++ should be >= 0.95.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time

import lib

CLASSES, PER_CLASS, BATCH, EPOCHS = 4, 500, 64, 5


def run(ctx):
    sys.path.insert(0, os.path.join(ctx.build_dir, "python"))
    import stoker  # noqa: E402  (built by CMake into build/python)

    images = os.path.join(ctx.tmp, "py-images")
    shards = os.path.join(ctx.tmp, "py-shards")
    lib.run([os.path.join(ctx.build_dir, "make_test_images"), images, "--classes", str(CLASSES),
             "--per-class", str(PER_CLASS), "--width", "160", "--height", "120"])
    lib.run([ctx.stoker, "convert", images, shards])
    pipe = (stoker.dataset(shards + "/").shuffle(seed=1).decode_image("jpg")
            .random_resized_crop("jpg", [64, 64]).flip("jpg")
            .normalize("jpg", mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], layout="CHW")
            .batch(BATCH).prefetch(8))
    spec_path = os.path.join(ctx.tmp, "py-spec.json")
    with open(spec_path, "w") as f:
        json.dump(pipe.spec, f)
    threads = max(1, os.cpu_count() or 1)

    def cpp_rate():
        err = subprocess.run([ctx.stoker, "run", spec_path, "--epochs", str(EPOCHS),
                              "--threads", str(threads)], check=True, capture_output=True,
                             text=True).stderr
        return float(re.search(r"([0-9.]+) elements/s", err).group(1))

    def py_rate():
        n = 0
        start = time.perf_counter()
        for epoch in range(EPOCHS):
            for batch in pipe.iterator(epoch=epoch, threads=threads):
                _ = batch["jpg"].shape
                n += 1
        return n / (time.perf_counter() - start)

    cpp, py = [], []
    for _ in range(max(3, ctx.repeat)):   # interleaved, so both see the same machine load
        cpp.append(cpp_rate())
        py.append(py_rate())
        lib.log(f"C++ {cpp[-1]:.1f} batches/s, Python {py[-1]:.1f} batches/s")
    c, p = statistics.median(cpp), statistics.median(py)
    text = (f"# Python iterator vs C++\n\n{lib.machine_line()}\n\n"
            f"{CLASSES * PER_CLASS} JPEGs 160x120, decode + random_resized_crop 64 + flip + "
            f"normalize CHW + batch {BATCH} + prefetch, {threads} threads, {EPOCHS} epochs per run, "
            f"median of {len(cpp)} interleaved runs.\n\n"
            "| side | batches/s | vs C++ |\n| --- | ---: | ---: |\n"
            f"| C++ (`stoker run`) | {c:.1f} | 1.00 |\n"
            f"| Python (`for batch in pipe`) | {p:.1f} | {p / c:.2f} |\n\n"
            "Goal: Python / C++ >= 0.95.\n")
    ctx.write_result("python", text)
