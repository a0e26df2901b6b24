#!/usr/bin/python3
"""DDP training through the stoker service: the script to copy for a real run.

    stoker dispatcher --port 5000 --work-dir /tmp/stoker-dispatcher &
    stoker worker --dispatcher 127.0.0.1:5000 &
    stoker worker --dispatcher 127.0.0.1:5000 &
    torchrun --redirects 1 --tee 1 --nproc_per_node 2 examples/train_ddp.py \\
        --dispatcher 127.0.0.1:5000 --data /data/shards/ --epochs 3 --checkpoint /tmp/ckpt.pt

Each rank (torchrun starts them; gloo on CPU, NCCL and one GPU per rank where CUDA is present)
reads its batches from the service's workers: stoker.torch.IterableDataset over
pipe.distribute(...) gives every rank the same number of batches per epoch (coordinated reads),
disjoint across ranks. The whole run is one service job: the ranks agree on its name through
torch.distributed, and it carries every epoch. len(ds) (batches per rank and epoch) sizes the
OneCycleLR schedule. Rank 0 writes a checkpoint (model, optimizer, schedule and ds.state_dict())
every --checkpoint-every steps and at each epoch's end; started again with the same --checkpoint,
the run continues from it: same epoch, exactly the batches not yet trained on.

Without --data a small JPEG dataset is generated first (needs stoker's build/make_test_images and
build/stoker, or STOKER_MAKE_TEST_IMAGES / STOKER_BIN). --record FILE writes, per rank, what it
received (FILE with .rankN before the extension): the job id, len(ds) and each epoch's keys.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import stoker
import stoker.torch


def build_pipeline(data_url, batch_size, size, seed):
    """The training pipeline: it runs on the service's workers, not in this process."""
    return (stoker.dataset(data_url, seed=seed)
            .shuffle()
            .decode_image("jpg")
            .random_resized_crop("jpg", [size, size])
            .flip("jpg", p=0.5)
            .normalize("jpg", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], layout="CHW")
            # Without drop_remainder: a coordinated job's checkpoints need batches of consecutive
            # samples (docs/protocol.md, "Checkpoint and resume"). Every rank still takes the same
            # number of steps: the service deals batches in rounds, one to each rank.
            .batch(batch_size))


class SmallCNN(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(32, classes))

    def forward(self, x):
        return self.net(x)


def make_dataset(workdir, classes, per_class):
    """A small JPEG folder tree converted to stoker shards (for trying the script)."""
    build = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build")
    make_images = os.environ.get("STOKER_MAKE_TEST_IMAGES", os.path.join(build, "make_test_images"))
    stoker_bin = os.environ.get("STOKER_BIN", os.path.join(build, "stoker"))
    images, shards = os.path.join(workdir, "images"), os.path.join(workdir, "shards")
    if not os.path.exists(os.path.join(shards, "manifest.json")):
        subprocess.run([make_images, images, "--classes", str(classes), "--per-class",
                        str(per_class), "--width", "48", "--height", "40"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([stoker_bin, "convert", images, shards], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return shards + "/"


def save_atomically(obj, path):
    """torch.save to PATH.tmp, then renamed over PATH: a kill leaves the old file or the new."""
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dispatcher", required=True, help="HOST:PORT of the stoker dispatcher")
    p.add_argument("--data", help="dataset URL (converted shards); default: a generated one")
    p.add_argument("--workdir", default=f"/tmp/stoker-ddp-example-{os.getuid()}",
                   help="where the generated dataset goes")
    p.add_argument("--classes", type=int, default=4, help="classes (of the generated dataset)")
    p.add_argument("--per-class", type=int, default=32, help="images per class (generated)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--size", type=int, default=32, help="crop size in pixels")
    p.add_argument("--lr", type=float, default=0.1, help="OneCycleLR's max_lr")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", help="checkpoint file: resumed from when it exists")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps (0: at epoch ends)")
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step "
                   "(to stand for a bigger model in tests)")
    p.add_argument("--record", help="write what each rank received to this JSON file (.rankN)")
    args = p.parse_args(argv)

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the workers decode; this process only trains

    if args.data:
        data = args.data
    else:  # rank 0 generates the dataset, the others wait for it
        if rank == 0:
            make_dataset(args.workdir, args.classes, args.per_class)
        dist.barrier()
        data = make_dataset(args.workdir, args.classes, args.per_class)

    pipe = build_pipeline(data, args.batch_size, args.size, args.seed)
    classes = len(pipe.classes)  # the class folders the dataset was converted from
    # One service job for the whole run: coordinated reads by the world's ranks (rank and world
    # size from torch.distributed), its name agreed through torch.distributed.
    ds = stoker.torch.IterableDataset(pipe.distribute(dispatcher=args.dispatcher))
    loader = ds.loader()
    steps_per_epoch = len(ds)  # batches each rank gets per epoch, known before the first one

    model = SmallCNN(classes).to(device)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr,
                                                total_steps=args.epochs * steps_per_epoch)
    loss_fn = nn.CrossEntropyLoss()

    start_epoch, step = 0, 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        start_epoch, step = ckpt["epoch"], ckpt["step"]
        # The next iteration continues from the saved position, and the service ends the job the
        # state was taken from if it still runs (a rank killed with kill -9 could not leave it).
        ds.load_state_dict(ckpt["data"])
        if rank == 0:
            print(f"resumed from {args.checkpoint}: epoch {start_epoch}, step {step}", flush=True)

    def checkpoint(epoch, end_of_epoch=False):
        """Rank 0 saves the run; ds.state_dict() is the same on every rank (coordinated reads),
        and every rank loads it on resume. A state taken at an epoch's end resumes with the next
        epoch (set_epoch(epoch + 1) after load_state_dict)."""
        if rank == 0 and args.checkpoint:
            save_atomically({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                             "scheduler": sched.state_dict(), "step": step,
                             "epoch": epoch + 1 if end_of_epoch else epoch,
                             "data": ds.state_dict()}, args.checkpoint)

    record_path = None
    if args.record:
        base, ext = os.path.splitext(args.record)
        record_path = f"{base}.rank{rank}{ext}"
    record = {"rank": rank, "world_size": world, "len": steps_per_epoch, "epochs": {}}
    if record_path and os.path.exists(record_path):
        with open(record_path) as f:
            record = json.load(f)

    t0 = time.perf_counter()
    for epoch in range(start_epoch, args.epochs):
        ds.set_epoch(epoch)
        keys, loss = [], None
        for batch in loader:
            x = batch["jpg"].to(device, non_blocking=True)
            y = batch["cls"].to(device, non_blocking=True)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces the gradients: every rank takes every step
            opt.step()
            sched.step()
            step += 1
            keys.extend(batch["__keys__"])
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                checkpoint(epoch)
            if args.step_delay:
                time.sleep(args.step_delay)
        checkpoint(epoch, end_of_epoch=True)
        if record_path:
            got = record["epochs"].setdefault(str(epoch), {"keys": [], "job_ids": []})
            got["keys"].extend(keys)
            got["job_ids"].append(ds.job_id)
            with open(record_path, "w") as f:
                json.dump(record, f)
        print(f"rank {rank} epoch {epoch}: {len(keys) // args.batch_size} batches "
              f"(len(ds) {steps_per_epoch}), loss {loss.item() if loss is not None else 'n/a'}, "
              f"job {ds.job_id}", flush=True)
    if rank == 0:
        print(f"done: {step} steps in {time.perf_counter() - t0:.1f} s", flush=True)
    ds.close()  # leaves the job (the end of the process would too)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
