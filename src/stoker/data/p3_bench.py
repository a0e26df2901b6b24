#!/usr/bin/python3
"""P3 (issue 4): JPEG decode + random_resized_crop 224 + flip + normalize, batch 256, from local
disk: stoker vs PyTorch DataLoader + torchvision, both on 2 cores, same files, one run; plus the
TurboJPEG decode-only ceiling per core. Prints a Markdown table (and writes it to --out).

usage: /usr/bin/python3 p3_bench.py --build BUILD_DIR [--images N] [--out FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def stoker_rate(build, spec, threads, epochs):
    r = subprocess.run([f"{build}/stoker", "run", spec, "--threads", str(threads),
                        "--epochs", str(epochs)], capture_output=True, text=True, check=True)
    m = re.search(r"([0-9.]+) samples/s", r.stderr)
    return float(m.group(1)), r.stderr


def torch_rate(root, workers, epochs):
    import torch
    import torchvision
    from torchvision import transforms as T
    torch.set_num_threads(1 if workers else 2)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=True, num_workers=workers,
                                     drop_last=False, persistent_workers=workers > 0)
    n = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for images, labels in dl:
            n += images.shape[0]
    return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    with tempfile.TemporaryDirectory() as work:
        images = f"{work}/images"
        subprocess.run([f"{build}/make_test_images", images, "--classes", "8", "--per-class",
                        str(args.images // 8)], check=True)
        subprocess.run([f"{build}/stoker", "convert", images, f"{work}/shards"], check=True,
                       capture_output=True)
        spec = {"source": {"dataset": f"{work}/shards/"}, "ops": [
            {"op": "shuffle", "seed": 7},
            {"op": "decode_image", "field": "jpg"},
            {"op": "random_resized_crop", "field": "jpg", "size": [224, 224]},
            {"op": "flip", "field": "jpg", "p": 0.5},
            {"op": "normalize", "field": "jpg", "mean": [0.485, 0.456, 0.406],
             "std": [0.229, 0.224, 0.225], "layout": "CHW"},
            {"op": "batch", "size": 256},
            {"op": "prefetch", "buffer": 2}]}
        spec_path = f"{work}/p3.json"
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        sizes = [os.path.getsize(os.path.join(d, x)) for d, _, fs in os.walk(images) for x in fs]
        ceiling = subprocess.run([f"{build}/decode_bench", images], capture_output=True,
                                 text=True, check=True).stdout
        stoker2, report = stoker_rate(build, spec_path, 2, args.epochs)
        stoker1, _ = stoker_rate(build, spec_path, 1, args.epochs)
        torch0 = torch_rate(images, 0, args.epochs)
        torch2 = torch_rate(images, 2, args.epochs)
    full = float(re.search(r"scale 1/1: ([0-9.]+)", ceiling).group(1))
    lines = [
        f"P3: {len(sizes)} JPEGs 500x375, {sum(sizes) / len(sizes) / 1024:.0f} KiB average, "
        f"{args.epochs} epochs; decode + random_resized_crop 224 + flip + normalize (CHW), batch 256",
        "",
        "| run | images/s | vs DataLoader (2 workers) |",
        "| --- | ---: | ---: |",
        f"| stoker, 2 threads | {stoker2:.0f} | {stoker2 / torch2:.2f}x |",
        f"| stoker, 1 thread | {stoker1:.0f} | {stoker1 / torch2:.2f}x |",
        f"| PyTorch DataLoader + torchvision, num_workers=2 | {torch2:.0f} | 1.00x |",
        f"| PyTorch DataLoader + torchvision, num_workers=0 | {torch0:.0f} | {torch0 / torch2:.2f}x |",
        "",
        "Decode-only ceiling (TurboJPEG, one core):",
        "",
    ] + ["    " + l for l in ceiling.strip().splitlines()] + [
        "",
        f"stoker at 2 threads / (2 x full-decode ceiling per core): {stoker2 / (2 * full):.2f}",
        "",
        "stoker run report (2 threads):",
        "",
    ] + ["    " + l for l in report.strip().splitlines()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
