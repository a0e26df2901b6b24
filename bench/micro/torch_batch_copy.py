#!/usr/bin/python3
"""What the torch adapter's copy of each batch costs (docs/python.md, "Batches are yours").

    PYTHONPATH=build/python /usr/bin/python3 bench/micro/torch_batch_copy.py [--reps 30]

Makes one real stoker batch (64 JPEGs decoded, resized to 224x224; uint8 HWC and float32 CHW
after normalize), then converts it to torch tensors as stoker.torch.IterableDataset does (one copy
per field) and, for comparison, as before (torch.from_numpy: no copy, read-only memory shared with
stoker). Prints MB/s and CPU-seconds per GB of the copy, process CPU time over the wall time.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings

import torch

import stoker
import stoker.torch


def measure(fn, element, reps):
    nbytes = sum(v.nbytes for k, v in element.items() if k != "__keys__")
    fn(element)
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(reps):
        fn(element)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    gb = nbytes * reps / 1e9
    return nbytes / 1e6, gb * 1000 / wall, cpu / gb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([os.path.join(args.build, "make_test_images"), f"{tmp}/img", "--classes",
                        "2", "--per-class", "32", "--width", "256", "--height", "256"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(args.build, "stoker"), "convert", f"{tmp}/img",
                        f"{tmp}/shards"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        base = stoker.dataset(f"{tmp}/shards/").decode_image("jpg").resize("jpg", size=[224, 224])
        cases = {"uint8 HWC": base.batch(64),
                 "float32 CHW": base.normalize("jpg", mean=[0.5] * 3, std=[0.25] * 3,
                                               layout="CHW").batch(64)}
        for name, pipe in cases.items():
            element = next(iter(pipe))
            ds = stoker.torch.IterableDataset(pipe)
            for how, fn in (("copy (stoker.torch)", ds._to_torch),
                            ("from_numpy, shared", lambda e: {k: torch.from_numpy(v) for k, v in
                                                              e.items() if k != "__keys__"})):
                mb, mbs, cpu = measure(fn, element, args.reps)
                print(f"{name:12s} batch of {mb:5.1f} MB, {how:20s}: {mbs:8.0f} MB/s, "
                      f"{cpu:.3f} CPU-s per GB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
