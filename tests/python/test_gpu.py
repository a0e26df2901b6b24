"""The device path from Python (docs/gpu.md): the DLPack export (checked on host memory here, so it
runs without a GPU), the to_device op's validation, and how a build without CUDA refuses it."""
import numpy as np
import pytest
import torch

import stoker
import stoker.torch
from stoker import _stoker

RANGE_SPEC = {"source": {"range": 8}, "ops": [{"op": "batch", "size": 4}]}


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64, np.float32])
def test_dlpack_export_is_zero_copy(dtype):
    values = np.arange(2 * 3 * 5).astype(dtype).reshape(2, 3, 5)
    a = _stoker._host_device_array(values)
    assert a.__dlpack_device__() == (1, 0)  # kDLCPU
    assert a.shape == (2, 3, 5) and a.device == -1 and a.nbytes == values.nbytes
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.data_ptr  # torch reads stoker's memory, no copy
    np.testing.assert_array_equal(t.numpy(), values)
    n = np.from_dlpack(a)
    np.testing.assert_array_equal(n, values)
    assert n.ctypes.data == a.data_ptr
    del a  # the consumers keep the memory alive through the capsule's deleter
    np.testing.assert_array_equal(t.numpy(), values)


def test_an_unconsumed_capsule_is_freed_and_copy_is_refused():
    a = _stoker._host_device_array(np.ones((4,), dtype=np.float32))
    capsule = a.__dlpack__()
    del capsule
    with pytest.raises(BufferError):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(2, 0))


def test_cpu_batches_stay_uint8_for_the_gpu_to_normalize(shards):
    # Without normalize, image batches are uint8 [n, h, w, c]: a quarter of float32's bytes.
    pipe = stoker.dataset(shards).decode_image("jpg").center_crop("jpg", 64).batch(4)
    batch = next(iter(pipe))
    assert batch["jpg"].dtype == np.uint8 and batch["jpg"].shape == (4, 64, 64, 3)


def test_to_device_must_be_the_last_op():
    spec = {"source": {"range": 8},
            "ops": [{"op": "to_device"}, {"op": "batch", "size": 4}]}
    with pytest.raises(ValueError, match=r"\$\.ops\[0\]\.op: .*to_device must be the last op"):
        stoker.Pipeline.from_spec(spec)


def test_to_device_parameters_are_validated():
    pipe = stoker.memory_range(8).batch(4)
    with pytest.raises(ValueError, match=r"\$\.ops\[1\]\.crop: .*name it with \"field\""):
        pipe.op("to_device", crop=32)._compile()
    with pytest.raises(ValueError, match=r"\$\.ops\[1\]\.std: .*both \"mean\" and \"std\""):
        pipe.to_device(field="value", mean=[0.5])._compile()
    with pytest.raises(ValueError, match=r"\$\.ops\[1\]\.layout"):
        pipe.to_device(field="value", layout="NCHW")._compile()


@pytest.mark.skipif(_stoker.HAVE_CUDA, reason="this build has CUDA")
def test_a_build_without_cuda_refuses_to_device():
    with pytest.raises(stoker.StokerError, match=r"-DSTOKER_CUDA=ON"):
        stoker.memory_range(8).batch(4).to_device()._compile()
    with pytest.raises(stoker.StokerError, match=r"-DSTOKER_CUDA=ON"):
        stoker.torch.IterableDataset(stoker.memory_range(8).batch(4), device="cuda")


def test_torch_adapter_device_argument():
    with pytest.raises(ValueError, match="CUDA devices only"):
        stoker.torch.IterableDataset(stoker.memory_range(8).batch(4), device="cpu")
    pipe = stoker.memory_range(8).batch(4).to_device(device=1)
    with pytest.raises(ValueError, match="names device 1"):
        stoker.torch.IterableDataset(pipe, device="cuda:0")


@pytest.mark.skipif(not _stoker.HAVE_CUDA, reason="this build has no CUDA (-DSTOKER_CUDA=ON)")
def test_cuda_tensors_from_the_torch_adapter():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    ds = stoker.torch.IterableDataset(stoker.memory_range(8).batch(4), device="cuda")
    batches = list(ds)
    assert [b["value"].device.type for b in batches] == ["cuda", "cuda"]
    assert torch.cat([b["value"] for b in batches]).cpu().tolist() == list(range(8))
