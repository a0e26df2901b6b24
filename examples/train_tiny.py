#!/usr/bin/python3
"""Trains a small CNN on CPU from a stoker pipeline, printing loss and images/s.

    /usr/bin/python3 examples/train_tiny.py                  # makes a small JPEG dataset first
    /usr/bin/python3 examples/train_tiny.py --data /data/shards/ --steps 300

The data arrive as torch tensors through stoker.torch.IterableDataset and a
DataLoader(batch_size=None, num_workers=0): stoker decodes, crops, flips, normalises and batches in
C++ threads, so the Python loop only trains. --dispatcher HOST:PORT runs the same pipeline on the
stoker service (one call: Pipeline.distribute; start `stoker dispatcher` and `stoker worker` first);
in-process is the default.
Needs PYTHONPATH to hold the built package (build/python) unless stoker is installed.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

import stoker
import stoker.torch


def make_dataset(workdir, stoker_bin, make_images, classes, per_class):
    """A JPEG folder tree (one sub-folder per class) converted to stoker shards."""
    images = os.path.join(workdir, "images")
    shards = os.path.join(workdir, "shards")
    subprocess.run([make_images, images, "--classes", str(classes), "--per-class", str(per_class),
                    "--width", "96", "--height", "72"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([stoker_bin, "convert", images, shards], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return shards + "/"


def build_pipeline(data_url, batch_size, size, seed):
    return (stoker.dataset(data_url, seed=seed)
            .shuffle()
            .decode_image("jpg")
            .random_resized_crop("jpg", [size, size])
            .flip("jpg", p=0.5)
            .normalize("jpg", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], layout="CHW")
            .batch(batch_size, drop_remainder=True)
            .prefetch(4))


class TinyCNN(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))

    def forward(self, x):
        return self.net(x)


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("STOKER_BUILD_DIR", os.path.join(here, "..", "build"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="dataset URL (shards); default: generate a small JPEG dataset")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--size", type=int, default=32, help="crop size in pixels")
    p.add_argument("--classes", type=int, default=4, help="classes of the generated dataset")
    p.add_argument("--per-class", type=int, default=64, help="images per class (generated)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--dispatcher", help="HOST:PORT of a stoker dispatcher (service mode)")
    p.add_argument("--stoker-bin", default=os.environ.get("STOKER_BIN", os.path.join(build, "stoker")))
    p.add_argument("--make-test-images", default=os.environ.get(
        "STOKER_MAKE_TEST_IMAGES", os.path.join(build, "make_test_images")))
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))

    with tempfile.TemporaryDirectory(prefix="stoker-train-") as workdir:
        data = args.data or make_dataset(workdir, args.stoker_bin, args.make_test_images,
                                         args.classes, args.per_class)
        pipe = build_pipeline(data, args.batch_size, args.size, args.seed)
        if args.dispatcher:
            pipe = pipe.distribute(dispatcher=args.dispatcher, job_name="train_tiny")
        loader = torch.utils.data.DataLoader(stoker.torch.IterableDataset(pipe),
                                             batch_size=None, num_workers=0)
        model = TinyCNN(args.classes)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()

        step, images, epoch = 0, 0, 0
        start = time.perf_counter()
        loss = None
        while step < args.steps:
            loader.dataset.set_epoch(epoch)
            for batch in loader:
                x, y = batch["jpg"], batch["cls"]
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                step += 1
                images += x.shape[0]
                if step % args.log_every == 0 or step == args.steps:
                    rate = images / (time.perf_counter() - start)
                    print(f"epoch {epoch} step {step}: loss {loss.item():.4f}, {rate:.0f} images/s",
                          flush=True)
                if step >= args.steps:
                    break
            epoch += 1
        elapsed = time.perf_counter() - start
        print(f"done: {step} steps, {images} images in {elapsed:.1f} s "
              f"({images / elapsed:.0f} images/s), final loss {loss.item():.4f}")
        return loss.item()


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
