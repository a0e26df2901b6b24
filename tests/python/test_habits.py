"""What Python users expect of the package: len(), class names, map(fn) in Python, the version,
and stoker.torch imported only when used."""
import subprocess
import sys
import threading

import numpy as np
import pytest

import stoker
from conftest import SOURCE_DIR


def count(pipe, **kw):
    return sum(1 for _ in pipe.iterator(**kw))


@pytest.mark.parametrize("build", [
    lambda p: p,
    lambda p: p.batch(8),
    lambda p: p.batch(8, drop_remainder=True),
    lambda p: p.shuffle(seed=3).batch(7).prefetch(2),
    lambda p: p.skip(5).batch(4).take(9),
    lambda p: p.batch(16).repeat(3),
    lambda p: p.take(13).batch(5).skip(1),
])
def test_len_equals_the_batches_yielded(shards, build):
    pipe = build(stoker.dataset(shards).map_field(keep=["cls"]))
    assert len(pipe) == count(pipe)
    for world_size in (2, 3, 7):
        for rank in range(world_size):
            assert pipe.num_elements(rank, world_size) == count(
                pipe, rank=rank, world_size=world_size), (rank, world_size)


def test_len_says_why_it_is_unknown(shards):
    base = stoker.dataset(shards)
    with pytest.raises(TypeError, match=r"len\(\) is unknown: ops\[0\] \(filter\) drops"):
        len(base.filter("cls", **{"in": [0]}).batch(4))
    cases = {
        r"ops\[0\] \(decode_image\) has on_error='skip'": base.decode_image("jpg", on_error="skip"),
        r"ops\[1\] \(repeat\) repeats forever": base.batch(4).repeat(),
        r"ops\[0\] \(invert\) is a plugin op": base.op("invert", field="jpg"),
        r"ops\[0\] \(bucket_by_length\)": base.bucket_by_length("jpg", [10], [2, 4]),
    }
    for reason, pipe in cases.items():
        with pytest.raises(TypeError, match=r"len\(\) is unknown: " + reason):
            stoker._length.elements_per_epoch(pipe.spec, 60)
    with pytest.raises(TypeError, match="stream of .tar/.tfrecord files"):
        stoker._length.elements_per_epoch(stoker.tar(["a.tar"]).spec, None)
    # The service: known without contacting it for one consumer in order (from the spec and the
    # manifest), refused naming the mode for a shared job.
    assert len(base.batch(4).distribute(dispatcher="127.0.0.1:1")) == len(base.batch(4))
    with pytest.raises(TypeError, match="on the service for a shared job"):
        len(base.batch(4).distribute(dispatcher="127.0.0.1:1", job_name="shared"))
    with pytest.raises(TypeError, match=r"on the service: ops\[1\] \(repeat\)"):
        len(base.batch(4).repeat(2).distribute(dispatcher="127.0.0.1:1"))


def test_classes_are_the_sorted_class_folders_and_match_the_cls_field(
        tmp_path, stoker_bin, make_images_bin):
    images = tmp_path / "images"
    subprocess.run([make_images_bin, str(images), "--classes", "3", "--per-class", "2",
                    "--width", "16", "--height", "16"], check=True, stdout=subprocess.DEVNULL)
    (images / "aardvark").mkdir()  # an empty class folder keeps its index, as in ImageFolder
    subprocess.run([stoker_bin, "convert", str(images), str(tmp_path / "shards")], check=True,
                   stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    pipe = stoker.dataset(tmp_path / "shards")
    folders = sorted(p.name for p in images.iterdir() if p.is_dir())
    assert pipe.classes == folders and folders[0] == "aardvark"
    assert pipe.class_to_idx == {name: i for i, name in enumerate(folders)}
    for element in pipe:
        key = element["__keys__"][0]
        assert int(element["cls"].tobytes()) == pipe.class_to_idx[key.split("/")[0]]
    with pytest.raises(ValueError, match="only a converted dataset"):
        stoker.memory_range(3).classes


def test_map_runs_python_on_its_own_thread_with_its_cost_in_the_stage_report(shards):
    threads, addresses = set(), []

    def add_mean(element):
        threads.add(threading.get_ident())
        addresses.append(element["jpg"].ctypes.data)
        out = dict(element)
        out["mean"] = np.float32(element["jpg"].mean()).reshape(1)
        out["double"] = (element["jpg"].astype(np.int64) * 2)
        return out

    pipe = (stoker.dataset(shards).decode_image("jpg").center_crop("jpg", 32)
            .map(add_mean).batch(4))
    it = pipe.iterator()
    batches = list(it)
    plain = list(stoker.dataset(shards).decode_image("jpg").center_crop("jpg", 32).batch(4))
    assert len(batches) == len(plain) == len(pipe) == 15
    for got, want in zip(batches, plain):
        np.testing.assert_array_equal(got["jpg"], want["jpg"])
        np.testing.assert_array_equal(got["double"], want["jpg"].astype(np.int64) * 2)
        np.testing.assert_allclose(got["mean"][:, 0], want["jpg"].reshape(4, -1).mean(axis=1),
                                   rtol=1e-5)
        assert got["__keys__"] == want["__keys__"]
    assert threads and threading.get_ident() not in threads and len(threads) == 1
    stage = [s for s in it.stats() if s["stage"].endswith("python_map")]
    assert stage and stage[0]["elements"] == 60 and stage[0]["cpu_seconds"] > 0


def test_map_keeps_an_unchanged_array_without_copying(shards):
    seen = []

    def identity(element):
        seen.append(element["jpg"].ctypes.data)
        return element

    for i, element in enumerate(stoker.dataset(shards).map(identity).take(3)):
        assert element["jpg"].ctypes.data == seen[i]


def test_map_resumes_from_a_checkpoint(shards):
    pipe = stoker.dataset(shards).shuffle(seed=2).map(lambda e: e).map_field(keep=["cls"]).batch(5)
    full = [b["__keys__"] for b in pipe]
    it = pipe.iterator()
    head = [next(it)["__keys__"] for _ in range(4)]
    state = it.state_dict()
    it2 = pipe.iterator()
    it2.load_state_dict(state)
    assert head + [b["__keys__"] for b in it2] == full


def test_map_errors_name_the_stage_and_the_sample(shards):
    def boom(element):
        raise KeyError("no such thing")

    with pytest.raises(stoker.StokerError, match=r"(?s)ops\[0\]\.python_map: the Python function "
                                                 r"raised KeyError.*no such thing.*sample"):
        list(stoker.dataset(shards).map(boom))
    with pytest.raises(stoker.StokerError, match="dtype float64.*astype"):
        list(stoker.dataset(shards).map(lambda e: {"x": np.zeros(2)}))
    with pytest.raises(stoker.StokerError, match="must return a dict"):
        list(stoker.dataset(shards).map(lambda e: 3))


def test_map_is_refused_on_the_service_naming_plugins(shards):
    pipe = stoker.dataset(shards).map(lambda e: e).batch(4)
    with pytest.raises(ValueError, match="ops\\[0\\] is map\\(fn\\).*C\\+\\+ plugin op"):
        pipe.distribute(dispatcher="127.0.0.1:1")


def test_version_and_lazy_torch():
    assert stoker.__version__.count(".") == 2 and stoker.__git_commit__
    code = ("import sys, stoker; assert 'torch' not in sys.modules; "
            "ds = stoker.torch.IterableDataset; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
