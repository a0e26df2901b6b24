"""The torch adapter and the example (one module: Debian's torch takes seconds to import)."""
import importlib.util
import os
import subprocess

import numpy as np
import pytest
import torch

import stoker
import stoker.torch
from conftest import SOURCE_DIR, image_spec


def test_iterable_dataset_with_a_dataloader(shards):
    pipe = stoker.Pipeline.from_spec(image_spec(shards))
    ds = stoker.torch.IterableDataset(pipe, rank=0, world_size=1)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    batches = list(loader)
    reference = list(pipe)
    assert len(batches) == len(reference) == 8
    for got, want in zip(batches, reference):
        assert isinstance(got["jpg"], torch.Tensor) and got["jpg"].dtype == torch.float32
        assert got["cls"].dtype == torch.int64
        assert got["__keys__"] == want["__keys__"]
        np.testing.assert_array_equal(got["jpg"].numpy(), want["jpg"])


def test_batches_are_the_trainers_own_tensors_and_numpy_views_refuse_writes(shards):
    """docs/python.md, "Batches are yours": torch tensors are private copies a trainer may modify
    in place; the numpy arrays stay read-only views of stoker's buffers and refuse writes."""
    pipe = stoker.dataset(shards).decode_image("jpg").center_crop("jpg", 64).batch(4)
    element = next(iter(pipe))
    assert not element["jpg"].flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        element["jpg"][0, 0, 0, 0] = 1
    before = element["jpg"].copy()
    ds = stoker.torch.IterableDataset(pipe)
    batch = ds._to_torch(element)
    x = batch["jpg"]
    assert x.shape == (4, 64, 64, 3) and x.is_contiguous()
    assert x.data_ptr() != element["jpg"].ctypes.data       # not stoker's buffer
    x.mul_(2)                                                # allowed, and changes only x
    np.testing.assert_array_equal(x.numpy(), (before * 2).astype(np.uint8))
    np.testing.assert_array_equal(element["jpg"], before)
    # Through the DataLoader too, every field.
    for got, want in zip(ds.loader(), pipe):
        got["jpg"].sub_(1)
        got["cls"].add_(10)
        np.testing.assert_array_equal(got["jpg"].numpy(), (want["jpg"] - 1).astype(np.uint8))
        np.testing.assert_array_equal(got["cls"].numpy(), want["cls"] + 10)
    # A second epoch is unchanged by what the trainer did to the first.
    np.testing.assert_array_equal(next(iter(ds))["jpg"].numpy(), before)


def test_ranks_split_the_epoch_and_state_resumes(shards):
    pipe = stoker.dataset(shards).shuffle(seed=1).map_field(keep=["cls"]).batch(6)
    ranks = [stoker.torch.IterableDataset(pipe, rank=r, world_size=2) for r in range(2)]
    keys = [[k for b in ds for k in b["__keys__"]] for ds in ranks]
    assert len(keys[0]) == len(keys[1]) == 30 and not set(keys[0]) & set(keys[1])

    ds = stoker.torch.IterableDataset(pipe, world_size=1, rank=0)
    full = [b["__keys__"] for b in ds]
    it = iter(ds)
    head = [next(it)["__keys__"] for _ in range(2)]
    state = ds.state_dict()
    ds2 = stoker.torch.IterableDataset(pipe, world_size=1, rank=0)
    ds2.load_state_dict(state)
    assert head + [b["__keys__"] for b in ds2] == full


def test_example_trains_a_few_steps(shards, capsys):
    path = os.path.join(SOURCE_DIR, "examples", "train_tiny.py")
    spec = importlib.util.spec_from_file_location("train_tiny", path)
    train_tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_tiny)
    loss = train_tiny.main(["--steps", "6", "--log-every", "3", "--batch-size", "8",
                            "--classes", "3", "--data", shards])
    out = capsys.readouterr().out
    assert "images/s" in out and "step 6" in out
    assert np.isfinite(loss)


def test_len_of_the_dataset_and_loader_is_this_ranks_batches(shards):
    pipe = stoker.dataset(shards).map_field(keep=["cls"]).batch(7)
    for world_size in (1, 2, 4):
        for rank in range(world_size):
            ds = stoker.torch.IterableDataset(pipe, rank=rank, world_size=world_size)
            loader = ds.loader()
            assert len(ds) == len(loader) == sum(1 for _ in loader), (rank, world_size)


def test_a_dataloader_that_batches_again_is_refused():
    ds = stoker.torch.IterableDataset(stoker.memory_range(8).batch(4))
    with pytest.raises(ValueError, match="batch_size=None"):
        next(iter(torch.utils.data.DataLoader(ds)))  # default batch_size=1
    with pytest.raises(ValueError, match="adds a dimension"):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=2)))
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=None)))
    assert batch["value"].tolist() == [0, 1, 2, 3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_pin_memory_without_cuda_says_so():
    with pytest.raises(ValueError, match="pin_memory=True needs CUDA.*is_available\\(\\) is False"):
        stoker.torch.IterableDataset(stoker.memory_range(8).batch(4), pin_memory=True)


def test_classes_match_torchvisions_image_folder(tmp_path, stoker_bin, make_images_bin):
    from torchvision.datasets.folder import find_classes
    images = tmp_path / "images"
    subprocess.run([make_images_bin, str(images), "--classes", "4", "--per-class", "1",
                    "--width", "16", "--height", "16"], check=True, stdout=subprocess.DEVNULL)
    (images / "0-empty").mkdir()
    subprocess.run([stoker_bin, "convert", str(images), str(tmp_path / "shards")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    classes, class_to_idx = find_classes(str(images))
    pipe = stoker.dataset(tmp_path / "shards")
    assert pipe.classes == classes and pipe.class_to_idx == class_to_idx
