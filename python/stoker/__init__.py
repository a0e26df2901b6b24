"""stoker: fast data ingestion for deep learning, from Python (docs/python.md).

    import stoker
    pipe = (stoker.dataset("/data/shards/").shuffle(seed=7).decode_image("jpg")
            .random_resized_crop("jpg", 224).batch(256))
    for batch in pipe:              # dicts of numpy arrays (views of stoker's buffers) + "__keys__"
        ...

Errors carry stoker's message: a bad spec raises ValueError naming the JSON path, a missing object
FileNotFoundError, other failures stoker.StokerError.
"""
from ._stoker import Buffer, DeviceArray, StokerError
from .pipeline import Iterator, Pipeline, dataset, from_spec, memory_range, tar, tfrecord
from .storage import ls, open
from . import service

__all__ = ["Buffer", "DeviceArray", "Iterator", "Pipeline", "StokerError", "dataset", "from_spec",
           "ls", "memory_range", "open", "service", "tar", "tfrecord"]
