"""stoker.torch: a PyTorch IterableDataset over a stoker Pipeline.

    ds = stoker.torch.IterableDataset(pipe)          # pipe ends with .batch(n)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)

stoker batches and parallelises in C++, so the DataLoader must neither batch again
(batch_size=None) nor fork workers (num_workers=0): workers would each run the whole pipeline and
copy every batch through shared memory. Tensors are the batch's own memory, which the trainer may
modify in place (batch["jpg"].mul_(2)): each CPU tensor is one copy of stoker's read-only buffer
(which may be a worker's shared memory or the block cache), or with pin_memory=True that copy is
into page-locked memory, for faster host-to-GPU transfer (needs CUDA).
len(ds) is the number of batches this rank gets per epoch (TypeError when the spec makes it
unknowable, e.g. a filter); a DataLoader that batches again (batch_size not None) is refused.

device="cuda" (or "cuda:N", a torch.device) yields CUDA tensors instead: the pipeline gets a
to_device op at its end if it has none (stoker then stages each batch in pinned memory, copies it
asynchronously and hands it to torch through DLPack without another copy; docs/gpu.md). Put the
image transforms in that op to run them on the GPU, e.g. pipe.to_device(field="jpg", mean=...,
std=..., layout="CHW"). Needs stoker built with CUDA (-DSTOKER_CUDA=ON) and a GPU.

Rank-aware: rank/world_size default to torch.distributed's when it is initialised, else the RANK
and WORLD_SIZE environment variables, else 0/1; each rank reads its own contiguous share of every
epoch's sample order (indexed sources).
Thread safety: one iteration at a time per dataset object (as with a DataLoader).
"""
import os
import sys
import warnings

import torch as _torch

from . import _stoker
from .pipeline import Pipeline

# Arrays from stoker are read-only views; torch warns about that for from_numpy, which this module
# calls on them only to copy them into pinned memory (_to_torch). Users' own calls still warn.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable",
                        module=r"stoker\.torch")


def _default_rank_world():
    dist = _torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class IterableDataset(_torch.utils.data.IterableDataset):
    def __init__(self, pipeline, epoch=0, rank=None, world_size=None, pin_memory=False,
                 threads=0, device=None):
        super().__init__()
        if not hasattr(pipeline, "iterator"):  # a Pipeline or pipe.distribute(...) is used as is
            pipeline = Pipeline.from_spec(pipeline)
        if pin_memory and not _torch.cuda.is_available():
            raise ValueError(
                "pin_memory=True needs CUDA (page-locked memory speeds up copies to a GPU), but "
                f"torch.cuda.is_available() is False (torch {_torch.__version__}, built with CUDA "
                f"{_torch.version.cuda}): drop pin_memory, or install a CUDA build of torch on a "
                "machine with a GPU")
        if device is not None:
            pipeline = _on_device(pipeline, _torch.device(device))
        default_rank, default_world = _default_rank_world()
        self.pipeline = pipeline
        self.rank = default_rank if rank is None else rank
        self.world_size = default_world if world_size is None else world_size
        self.pin_memory = pin_memory
        self.threads = threads
        self._epoch = epoch
        self._iterator = None
        self._pending_state = None

    def set_epoch(self, epoch):
        """The epoch the next iteration runs (shuffles differ per epoch)."""
        self._epoch = epoch

    def __len__(self):
        """Batches (elements) this rank gets per epoch; TypeError saying why when unknown."""
        if not hasattr(self.pipeline, "num_elements"):
            return len(self.pipeline)  # DistributedPipeline: raises TypeError with the reason
        return self.pipeline.num_elements(self.rank, self.world_size)

    def __iter__(self):
        if _torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("stoker.torch.IterableDataset runs its own threads: use "
                               "DataLoader(ds, batch_size=None, num_workers=0)")
        _refuse_dataloader_batching(sys._getframe(1))
        return self._generate()

    def _generate(self):
        state, self._pending_state = self._pending_state, None
        if state is not None and hasattr(self.pipeline, "load_state_dict"):
            # The service: the consumer starts from the state, so no job is made for the epoch's
            # start only to be left at once.
            self.pipeline.load_state_dict(state)
            state = None
        it = self.pipeline.iterator(epoch=self._epoch, threads=self.threads, rank=self.rank,
                                    world_size=self.world_size)
        if state is not None:
            it.load_state_dict(state)
        self._iterator = it
        for element in it:
            yield self._to_torch(element)

    def _to_torch(self, element):
        out = {}
        for name, value in element.items():
            if name == "__keys__":
                out[name] = value
                continue
            if isinstance(value, _stoker.DeviceArray):
                # GPU memory: torch's current stream waits for the batch's event; no copy.
                out[name] = _torch.from_dlpack(value)
                continue
            # stoker's arrays are read-only views of memory that may be shared (a worker's
            # shared-memory segment, the block cache): the tensor gets its own copy, which the
            # trainer may modify in place. pin_memory's copy is already the batch's own.
            if self.pin_memory:
                out[name] = _torch.from_numpy(value).pin_memory()
            else:
                # numpy's copy: 3-6x torch's copy_ on Debian's torch (docs/python.md, "Batches
                # are yours").
                out[name] = _torch.from_numpy(value.copy())
        return out

    def loader(self, **kwargs):
        """torch.utils.data.DataLoader(self, batch_size=None, num_workers=0, **kwargs): the
        DataLoader settings that fit stoker."""
        kwargs.setdefault("batch_size", None)
        kwargs.setdefault("num_workers", 0)
        return _torch.utils.data.DataLoader(self, **kwargs)

    @property
    def job_id(self):
        """The service job the last iteration read (None in-process or before iterating): one job
        for every epoch of the run."""
        return getattr(self._iterator, "job_id", None)

    def close(self):
        """On the service: leaves the job now, which ends it once every consumer left (the end of
        the process does the same). In-process: nothing to do."""
        self._iterator = None
        if hasattr(self.pipeline, "close"):
            self.pipeline.close()

    def state_dict(self):
        """The position after the last batch yielded by the current iteration (for checkpoints)."""
        if self._iterator is None:
            raise RuntimeError("state_dict() before iteration started")
        return self._iterator.state_dict()

    def load_state_dict(self, state):
        """The next iteration resumes from `state` (its epoch included)."""
        self._pending_state = state
        self._epoch = state.get("epoch", self._epoch)


def _on_device(pipeline, device):
    """`pipeline` ending with a to_device op for `device` (a CUDA torch.device)."""
    if device.type != "cuda":
        raise ValueError(f"device={device}: stoker moves batches to CUDA devices only "
                         "(leave device out for CPU tensors)")
    index = device.index if device.index is not None else 0
    op = pipeline._device_op()
    if op is None:
        pipeline = pipeline.op("to_device", device=index)
        if hasattr(pipeline, "_compile"):
            pipeline._compile()  # a build without CUDA says so now, not at the first batch
        return pipeline
    if op.get("device", 0) != index:
        raise ValueError(f"device={device} but the pipeline's to_device op names device "
                         f"{op.get('device', 0)}")
    return pipeline


def _refuse_dataloader_batching(frame):
    """DataLoader(ds) defaults to batch_size=1: it would collate stoker's batches again, adding a
    dimension to every tensor. The DataLoader's fetcher calls iter(ds) with its auto_collation
    flag set; refuse that, naming the fix."""
    for _ in range(4):
        if frame is None:
            return
        fetcher = frame.f_locals.get("self")
        if getattr(fetcher, "auto_collation", False) and hasattr(fetcher, "dataset"):
            raise ValueError(
                "stoker.torch.IterableDataset yields ready batches, but this DataLoader batches "
                "them again (its batch_size is not None; the default is 1), which adds a "
                "dimension to every tensor: use DataLoader(ds, batch_size=None, num_workers=0), "
                "or ds.loader()")
        frame = frame.f_back
