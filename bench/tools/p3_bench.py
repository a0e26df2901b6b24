#!/usr/bin/python3
"""P3: JPEG decode + random_resized_crop 224 + flip + normalize, batch 256, from local
disk: stoker vs PyTorch DataLoader + torchvision, both on 2 cores, same files, one run; plus the
TurboJPEG decode-only ceiling per core. Prints a Markdown table (and writes it to --out).

usage: /usr/bin/python3 p3_bench.py --build BUILD_DIR [--images N] [--out FILE]
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time


def run_measured(cmd):
    """Runs cmd; returns (stdout, stderr, CPU seconds of it and its descendants)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r.stdout, r.stderr, cpu


def stoker_rate(build, spec, threads, epochs, images):
    _, err, cpu = run_measured([f"{build}/stoker", "run", spec, "--threads", str(threads),
                                "--epochs", str(epochs)])
    m = re.search(r"([0-9.]+) samples/s", err)
    return float(m.group(1)), images * epochs / cpu, err


def torch_measured(root, workers, epochs, images):
    out, _, cpu = run_measured([sys.executable, __file__, "--torch-root", root,
                                "--torch-workers", str(workers), "--epochs", str(epochs)])
    return float(out.strip().splitlines()[-1]), images * epochs / cpu


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
    ap.add_argument("--torch-root")  # internal: run only the DataLoader side
    ap.add_argument("--torch-workers", type=int, default=0)
    args = ap.parse_args()
    if args.torch_root:
        print(torch_rate(args.torch_root, args.torch_workers, args.epochs))
        return 0
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
        n = len(sizes)
        stoker2, stoker2_cpu, report = stoker_rate(build, spec_path, 2, args.epochs, n)
        stoker1, stoker1_cpu, _ = stoker_rate(build, spec_path, 1, args.epochs, n)
        torch0, torch0_cpu = torch_measured(images, 0, args.epochs, n)
        torch2, torch2_cpu = torch_measured(images, 2, args.epochs, n)
        load = os.getloadavg()[0]
    full = float(re.search(r"scale 1/1: ([0-9.]+)", ceiling).group(1))
    lines = [
        f"P3: {len(sizes)} JPEGs 500x375, {sum(sizes) / len(sizes) / 1024:.0f} KiB average, "
        f"{args.epochs} epochs; decode + random_resized_crop 224 + flip + normalize (CHW), batch 256",
        "",
        f"Load average during the run: {load:.1f} on {os.cpu_count()} cores. Wall-clock rates depend on",
        "other load; images per CPU-second do not (2 idle cores give at most twice that).",
        "",
        "| run | images/s (wall) | vs DataLoader (2 workers) | images per CPU-second | vs DataLoader |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| stoker, 2 threads | {stoker2:.0f} | {stoker2 / torch2:.2f}x | {stoker2_cpu:.0f} | {stoker2_cpu / torch2_cpu:.2f}x |",
        f"| stoker, 1 thread | {stoker1:.0f} | {stoker1 / torch2:.2f}x | {stoker1_cpu:.0f} | {stoker1_cpu / torch2_cpu:.2f}x |",
        f"| PyTorch DataLoader + torchvision, num_workers=2 | {torch2:.0f} | 1.00x | {torch2_cpu:.0f} | 1.00x |",
        f"| PyTorch DataLoader + torchvision, num_workers=0 | {torch0:.0f} | {torch0 / torch2:.2f}x | {torch0_cpu:.0f} | {torch0_cpu / torch2_cpu:.2f}x |",
        "",
        "Decode-only ceiling (TurboJPEG, one core):",
        "",
    ] + ["    " + l for l in ceiling.strip().splitlines()] + [
        "",
        f"stoker images per CPU-second / full-decode ceiling per core: {stoker1_cpu / full:.2f}",
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
