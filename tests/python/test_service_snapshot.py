"""Snapshots (docs/format.md and docs/protocol.md, "Snapshots"): `stoker snapshot` writes a
pipeline's output through the service as a stoker dataset, with real processes: a worker killed
with SIGKILL mid-snapshot costs nothing and duplicates nothing, a reader with "wait": true started
while the snapshot is written gets every element once, and the errors name the destination."""
import collections
import json
import os
import re
import signal
import subprocess
import time

import pytest

import stoker
from conftest import converted_images
from service_cluster import Cluster, slow_image_spec

pytestmark = pytest.mark.skipif(not stoker._stoker.HAVE_SERVICE,
                                reason="built without the service")


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory, stoker_bin, make_images_bin):
    """3 classes x 100 JPEGs of 96x72 as shards: enough work that a snapshot outlasts a kill."""
    return converted_images(tmp_path_factory.mktemp("snapshot-data"), stoker_bin,
                            make_images_bin, 100)


def elements(spec, epoch=0):
    """(keys, field, dtype, shape, bytes) of every element of `spec`, in-process."""
    out = []
    for e in stoker.Pipeline.from_spec(spec).iterator(epoch=epoch):
        keys = tuple(e.pop("__keys__"))
        for name in sorted(e):
            a = e[name]
            out.append((keys, name, str(a.dtype), tuple(a.shape), a.tobytes()))
    return out


def progress_parts(dst):
    try:
        with open(os.path.join(dst, "snapshot-progress.json")) as f:
            return len(json.load(f)["shards"])
    except (OSError, ValueError):
        return 0  # not written yet, or being replaced


def start_snapshot(stoker_bin, spec_file, dst, cluster):
    """`stoker snapshot SPEC DST` running, once it has listed its first part."""
    snap = subprocess.Popen([stoker_bin, "snapshot", str(spec_file), dst, "--dispatcher",
                             cluster.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 30
    while progress_parts(dst) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)  # polling a file another process writes
    assert progress_parts(dst) >= 1, "no part was listed"
    return snap


def run_cli(argv, timeout=60):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def test_snapshot_with_a_killed_worker_and_a_waiting_reader(many_shards, stoker_bin, tmp_path):
    spec = slow_image_spec(many_shards)
    local = elements(spec)
    assert len(local) == 150  # 75 batches, two fields each
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    dst = str(tmp_path / "snap")
    with Cluster(stoker_bin, tmp_path / "c", worker_timeout_ms=1000) as cluster:
        cluster.add_worker("--threads", "1")
        cluster.add_worker("--threads", "1")
        cluster.wait_for_workers(2)
        snap = start_snapshot(stoker_bin, spec_file, dst, cluster)
        # A reader of the snapshot being written, then a worker killed mid-snapshot.
        reader_spec = tmp_path / "reader.json"
        reader_spec.write_text(json.dumps({"source": {"dataset": dst, "wait": True,
                                                      "wait_timeout_s": 30}}))
        reader = subprocess.Popen([stoker_bin, "run", str(reader_spec), "--digest"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cluster.workers[1].send_signal(signal.SIGKILL)
        # What a lost attempt leaves behind (a part no element named): deleted at the end.
        stray = os.path.join(dst, "part-e00000-s00000000-w99-00000000deadbeef.stk")
        with open(stray, "wb") as f:
            f.write(b"a part of an attempt that lost")
        assert snap.poll() is None, "the snapshot ended before the worker was killed"
        out, err = snap.communicate(timeout=60)
        assert snap.returncode == 0, err
        assert re.search(r"snapshot .*: \d+ parts, 75 elements, .* MB in .* s; \d+ other object",
                         err), err
        read_out, read_err = reader.communicate(timeout=60)
        assert reader.returncode == 0, read_err
        assert re.search(r"leasing its splits again", cluster.log()), cluster.log()
    # Read back as a dataset: the same elements as in-process, each once.
    got = elements({"source": {"dataset": dst}})
    assert stoker.dataset(dst).spec == {"source": {"dataset": dst}, "ops": []}
    assert len(stoker.dataset(dst)) == 75
    assert stoker.dataset(dst, wait=True, wait_timeout_s=5).spec["source"] == {
        "dataset": dst, "wait": True, "wait_timeout_s": 5}
    assert sum(len(e["__keys__"]) for e in stoker.dataset(dst, wait=True)) == 300
    with pytest.raises(TypeError, match="snapshot read while it is written"):
        len(stoker.dataset(dst, wait=True))
    assert collections.Counter(got) == collections.Counter(local)
    keys = [k for (ks, name, *_rest) in got if name == "jpg" for k in ks]
    assert len(keys) == len(set(keys)) == 300
    # The manifest lists exactly the parts that are there: no orphan, no progress file left.
    with open(os.path.join(dst, "manifest.json")) as f:
        manifest = json.load(f)
    assert sorted(os.listdir(dst)) == sorted(["manifest.json"] +
                                             [s["name"] for s in manifest["shards"]])
    assert manifest["total_samples"] == 75
    assert not os.path.exists(stray)
    # Parts are listed in the job's order, so the snapshot in manifest order is `stoker run`'s
    # output, and so is what the waiting reader got.
    expected = run_cli([stoker_bin, "run", str(spec_file), "--digest"])
    assert expected.returncode == 0, expected.stderr
    digest = re.search(r"sha256 [0-9a-f]+", expected.stdout).group(0)
    assert digest in read_out, (read_out, read_err)
    back = tmp_path / "back.json"
    back.write_text(json.dumps({"source": {"dataset": dst}}))
    again = run_cli([stoker_bin, "run", str(back), "--digest"])
    assert again.returncode == 0 and digest in again.stdout, again.stderr
    # A destination that is not empty is refused, naming it.
    refused = run_cli([stoker_bin, "snapshot", str(spec_file), dst, "--dispatcher",
                       "127.0.0.1:1"])
    assert refused.returncode == 1
    assert f"snapshot destination {dst} is not empty" in refused.stderr, refused.stderr
    assert "already holds a dataset or snapshot" in refused.stderr, refused.stderr


def test_the_dispatcher_restarted_mid_snapshot_loses_nothing(many_shards, stoker_bin, tmp_path):
    spec = slow_image_spec(many_shards)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    dst = str(tmp_path / "snap")
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        cluster.add_worker("--threads", "1")
        cluster.add_worker("--threads", "1")
        cluster.wait_for_workers(2)
        snap = start_snapshot(stoker_bin, spec_file, dst, cluster)
        cluster.restart_dispatcher()
        assert snap.poll() is None, "the snapshot ended before the dispatcher was restarted"
        out, err = snap.communicate(timeout=60)
        assert snap.returncode == 0, err
        # A later job reads the snapshot through the service instead of computing it again.
        reader_spec = tmp_path / "reader.json"
        reader_spec.write_text(json.dumps({"source": {"dataset": dst}}))
        consumed = run_cli([stoker_bin, "consume", "--dispatcher", cluster.address,
                            str(reader_spec), "--print-keys"])
        assert consumed.returncode == 0, consumed.stderr
    assert collections.Counter(elements({"source": {"dataset": dst}})) == \
        collections.Counter(elements(spec))
    keys = consumed.stdout.split()
    assert len(keys) == len(set(keys)) == 300


def test_reader_started_before_the_snapshot_gets_every_element_once(stoker_bin, tmp_path):
    spec = {"source": {"range": 3000}, "ops": [{"op": "shuffle", "seed": 3},
                                               {"op": "batch", "size": 10}]}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    dst = str(tmp_path / "snap")
    reader_spec = tmp_path / "reader.json"
    reader_spec.write_text(json.dumps({"source": {"dataset": dst, "wait": True,
                                                  "wait_timeout_s": 30}}))
    reader = subprocess.Popen([stoker_bin, "run", str(reader_spec), "--print-keys"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        cluster.add_worker()
        cluster.add_worker()
        cluster.wait_for_workers(2)
        assert reader.poll() is None, reader.stderr.read()
        snap = run_cli([stoker_bin, "snapshot", str(spec_file), dst, "--dispatcher",
                        cluster.address, "--epochs", "2"])
        assert snap.returncode == 0, snap.stderr
        assert re.search(r"\d+ parts, 600 elements", snap.stderr), snap.stderr
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    keys = out.split()
    # Two epochs: every key twice, nothing lost, nothing else.
    assert collections.Counter(keys) == collections.Counter(
        [str(i) for i in range(3000)] * 2)
    # Epoch by epoch, in the job's order: each epoch is that epoch's in-process order.
    local = [k for e in (0, 1) for (ks, *_r) in elements(spec, e) for k in ks]  # one field
    assert keys == local


def test_a_waiting_reader_times_out_naming_the_destination(stoker_bin, tmp_path):
    dst = str(tmp_path / "never")
    spec = tmp_path / "reader.json"
    spec.write_text(json.dumps({"source": {"dataset": dst, "wait": True,
                                           "wait_timeout_s": 0.5}}))
    start = time.monotonic()
    r = run_cli([stoker_bin, "run", str(spec)])
    assert r.returncode == 1
    assert time.monotonic() - start < 10
    assert f"snapshot {dst}: no new part for 0.5 s and no manifest.json yet" in r.stderr, r.stderr


def test_snapshot_to_s3_read_while_written(stoker_bin, s3_server, tmp_path):
    env = dict(os.environ, **s3_server)
    subprocess.run(["/usr/bin/aws", "--endpoint-url", s3_server["AWS_ENDPOINT_URL"], "s3", "mb",
                    "s3://snap"], env=env, check=True, stdout=subprocess.DEVNULL)
    spec = {"source": {"range": 2000}, "ops": [{"op": "shuffle", "seed": 9},
                                               {"op": "batch", "size": 10}]}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    dst = "s3://snap/run1/"
    reader_spec = tmp_path / "reader.json"
    reader_spec.write_text(json.dumps({"source": {"dataset": dst, "wait": True,
                                                  "wait_timeout_s": 30}}))
    reader = subprocess.Popen([stoker_bin, "run", str(reader_spec), "--digest"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Cluster(stoker_bin, tmp_path / "c", env=env) as cluster:
        cluster.add_worker()
        cluster.add_worker()
        cluster.wait_for_workers(2)
        snap = subprocess.run([stoker_bin, "snapshot", str(spec_file), dst, "--dispatcher",
                               cluster.address], env=env, capture_output=True, text=True,
                              timeout=120)
        assert snap.returncode == 0, snap.stderr
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    expected = run_cli([stoker_bin, "run", str(spec_file), "--digest"])
    digest = re.search(r"sha256 [0-9a-f]+", expected.stdout).group(0)
    assert digest in out, (out, err)
    back = tmp_path / "back.json"
    back.write_text(json.dumps({"source": {"dataset": dst}}))
    again = subprocess.run([stoker_bin, "run", str(back), "--digest"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and digest in again.stdout, again.stderr
    listed = subprocess.run([stoker_bin, "ls", dst], env=env, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    names = sorted(os.path.basename(line.split()[-1]) for line in listed.stdout.splitlines()
                   if line.strip())
    manifest = json.loads(subprocess.run([stoker_bin, "cat", dst + "manifest.json"], env=env,
                                         capture_output=True, text=True, timeout=60).stdout)
    assert names == sorted(["manifest.json"] + [s["name"] for s in manifest["shards"]])


def test_a_failed_snapshot_fails_its_waiting_readers_at_once(stoker_bin, tmp_path):
    dst = str(tmp_path / "snap")
    # Decoding non-images fails the job on the workers, with the sample's key.
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"source": {"range": 100},
                                     "ops": [{"op": "decode_image", "field": "value"}]}))
    reader_spec = tmp_path / "reader.json"
    reader_spec.write_text(json.dumps({"source": {"dataset": dst, "wait": True,
                                                  "wait_timeout_s": 60}}))
    reader = subprocess.Popen([stoker_bin, "run", str(reader_spec)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    with Cluster(stoker_bin, tmp_path / "c") as cluster:
        cluster.add_worker()
        snap = run_cli([stoker_bin, "snapshot", str(spec_file), dst, "--dispatcher",
                        cluster.address])
    assert snap.returncode == 1
    assert "decode_image" in snap.stderr, snap.stderr
    start = time.monotonic()
    _, err = reader.communicate(timeout=30)
    assert reader.returncode == 1
    assert time.monotonic() - start < 10
    assert f"snapshot {dst} failed" in err and "decode_image" in err, err
