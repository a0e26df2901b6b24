"""stoker: fast data ingestion for deep learning, from Python (docs/python.md).

    import stoker
    pipe = (stoker.dataset("/data/shards/").shuffle(seed=7).decode_image("jpg")
            .random_resized_crop("jpg", 224).batch(256))
    for batch in pipe:              # dicts of numpy arrays (views of stoker's buffers) + "__keys__"
        ...
    ds = stoker.torch.IterableDataset(pipe)   # stoker.torch is imported on first use

Errors carry stoker's message: a bad spec raises ValueError naming the JSON path, a missing object
FileNotFoundError, other failures stoker.StokerError.
"""
import importlib as _importlib
import os as _os

try:
    from ._stoker import Buffer, DeviceArray, StokerError
    from ._stoker import __version__, GIT_COMMIT as __git_commit__
except ImportError as _error:  # a system library the extension links is missing
    _listing = _os.path.join(_os.path.dirname(__file__), "system-libraries.txt")
    raise ImportError(
        f"stoker's extension (stoker._stoker) cannot be loaded: {_error}. It needs the shared "
        f"libraries listed in {_listing} (soname, path, Debian package); on Debian 12 "
        "`sudo bash scripts/install-deps.sh` from stoker's source installs them all") from _error

from .pipeline import Iterator, Pipeline, dataset, from_spec, memory_range, tar, tfrecord
from .storage import ls, open
from . import service

__all__ = ["Buffer", "DeviceArray", "Iterator", "Pipeline", "StokerError", "dataset", "from_spec",
           "ls", "memory_range", "open", "service", "tar", "tfrecord", "torch"]


def __getattr__(name):
    # stoker.torch imports torch (seconds): only when first used.
    if name == "torch":
        return _importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'stoker' has no attribute {name!r}")
