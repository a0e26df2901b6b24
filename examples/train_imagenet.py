#!/usr/bin/python3
"""Trains torchvision's ResNet-18 ImageNet-style from a stoker pipeline, on a small generated dataset.

    python3 examples/train_imagenet.py                          # in-process
    python3 examples/train_imagenet.py --service                # on a stoker service it starts
    torchrun --redirects 1 --tee 1 --nproc_per_node 2 examples/train_imagenet.py  # 2 processes

The data: a JPEG folder tree root/<class>/<image>.jpg (generated, or --data with a converted
dataset), converted by `stoker convert`; stoker shuffles, decodes, crops, flips, normalises and
batches in C++ threads, and torch only trains. The class names come from the dataset's manifest
(pipe.classes), the learning-rate schedule's length from len(loader).
--service starts `stoker dispatcher` and 2 `stoker worker` processes on loopback and runs the same
pipeline through them (--dispatcher HOST:PORT uses a service already running). Under torchrun each
rank reads its own share of every epoch (stoker.torch picks up torch.distributed's rank) and
DistributedDataParallel averages the gradients (gloo, CPU).
The `stoker` command comes from PATH (a venv with stoker installed), else STOKER_BIN or build/.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torchvision

import stoker

HERE = os.path.dirname(os.path.abspath(__file__))


def stoker_command():
    found = os.environ.get("STOKER_BIN") or shutil.which("stoker")
    return found or os.path.join(HERE, "..", "build", "stoker")


def generate_images(root, classes, per_class, size, seed=0):
    """A folder tree of JPEGs whose class shows in colour and stripes (learnable in a few steps)."""
    gen = torch.Generator().manual_seed(seed)
    for c in range(classes):
        folder = os.path.join(root, f"class{c:02d}")
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            image = torch.rand(3, size, size, generator=gen) * 80
            image[c % 3] += 120
            image[:, :, (c * 7) % size::classes + 2] += 50
            jpeg = torchvision.io.encode_jpeg(image.clamp(0, 255).to(torch.uint8), quality=90)
            with open(os.path.join(folder, f"{i:04d}.jpg"), "wb") as f:
                f.write(jpeg.numpy().tobytes())


def prepare_data(args, rank):
    """The dataset URL: --data, else a generated tree converted once (by rank 0)."""
    if args.data:
        return args.data
    shards = os.path.join(args.workdir, "shards")
    if rank == 0 and not os.path.exists(os.path.join(shards, "manifest.json")):
        images = os.path.join(args.workdir, "images")
        shutil.rmtree(images, ignore_errors=True)
        generate_images(images, args.classes, args.per_class, args.image_size)
        subprocess.run([stoker_command(), "convert", "--quiet", images, shards], check=True,
                       stdout=subprocess.DEVNULL)
    if dist.is_initialized():
        dist.barrier()
    return shards + "/"


def build_pipeline(url, batch_size, crop, seed):
    return (stoker.dataset(url, seed=seed)
            .shuffle()
            .decode_image("jpg")
            .random_resized_crop("jpg", [crop, crop])
            .flip("jpg", p=0.5)
            .normalize("jpg", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], layout="CHW")
            .batch(batch_size, drop_remainder=True)
            .prefetch(2))


class LocalService:
    """`stoker dispatcher` and `workers` x `stoker worker` on loopback, stopped on exit."""

    def __init__(self, workers):
        self.processes = []
        dispatcher = self._start([stoker_command(), "dispatcher", "--port", "0"])
        line = dispatcher.stdout.readline()
        port = re.search(r"serving on port (\d+)", line)
        if not port:
            raise RuntimeError(f"stoker dispatcher did not start: {line!r}")
        self.address = f"127.0.0.1:{port.group(1)}"
        for _ in range(workers):
            worker = self._start([stoker_command(), "worker", "--dispatcher", self.address])
            worker.stdout.readline()  # "worker: serving on ..." once registered

    def _start(self, argv):
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.processes.append(process)
        return process

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        # Workers first (each drains and tells the dispatcher it leaves), then the dispatcher.
        workers, dispatcher = self.processes[1:], self.processes[0]
        for process in workers:
            process.terminate()
        for process in workers + [dispatcher]:
            if process is dispatcher:
                process.terminate()
            process.wait(timeout=30)


def train(args, url, rank, world_size, dispatcher=None):
    torch.manual_seed(args.seed)
    pipe = build_pipeline(url, args.batch_size, args.crop, args.seed)
    classes = pipe.classes
    # Batches per epoch for the LR schedule: this rank's share in-process; on the service this
    # consumer gets every batch of the job, as many as the in-process pipeline has.
    steps_per_epoch = pipe.num_elements(rank, world_size)
    source = pipe.distribute(dispatcher=dispatcher) if dispatcher else pipe
    ds = stoker.torch.IterableDataset(source, rank=rank, world_size=world_size)
    loader = ds.loader()
    model = torchvision.models.resnet18(num_classes=len(classes))
    if world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=max(1, args.epochs * steps_per_epoch))
    loss_fn = torch.nn.CrossEntropyLoss()
    where = (f"service {dispatcher}" if dispatcher else
             f"in-process, rank {rank} of {world_size}")
    if rank == 0:
        print(f"ResNet-18, {len(classes)} classes {classes[:3]}..., {steps_per_epoch} steps per "
              f"epoch of {args.batch_size} images, {where}", flush=True)
    step, images, loss, start = 0, 0, torch.tensor(0.0), time.perf_counter()
    model.train()
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        for batch in loader:
            x, y = batch["jpg"], batch["cls"]  # float32 [B,3,H,W]; int64 class indices [B]
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step + 1 < args.epochs * steps_per_epoch:
                schedule.step()
            step += 1
            images += len(y)
            if rank == 0 and step % args.log_every == 0:
                rate = images * world_size / (time.perf_counter() - start)
                print(f"epoch {epoch} step {step}: loss {loss.item():.3f}, {rate:.1f} images/s",
                      flush=True)
    if rank == 0:
        print(f"done: {step} steps, final loss {loss.item():.3f}", flush=True)
    return step, loss.item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a converted dataset's URL; default: generate one in --workdir")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(),
                                                     f"stoker-imagenet-example-{os.getuid()}"))
    p.add_argument("--classes", type=int, default=4, help="classes to generate")
    p.add_argument("--per-class", type=int, default=16, help="images per class to generate")
    p.add_argument("--image-size", type=int, default=48, help="generated images' side")
    p.add_argument("--crop", type=int, default=32, help="random-resized-crop side")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=2)
    p.add_argument("--service", action="store_true",
                   help="start a dispatcher and 2 workers on loopback and train through them")
    p.add_argument("--dispatcher", help="HOST:PORT of a running stoker dispatcher")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // int(os.environ.get("WORLD_SIZE", 1))))

    if "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", 1)) > 1:
        dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank = dist.get_rank() if dist.is_initialized() else 0
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    try:
        url = prepare_data(args, rank)
        if args.service:
            with LocalService(workers=2) as service:
                return train(args, url, rank, world_size, dispatcher=service.address)
        return train(args, url, rank, world_size, dispatcher=args.dispatcher)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
