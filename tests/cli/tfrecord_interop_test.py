#!/usr/bin/python3
"""TFRecord files and WebDataset tars written by writers that are not stoker's, under the names
other tools give them, converted with the `stoker` CLI and read back as a user reads them
(docs/format.md, "Telling the input formats apart"; run by CTest as format_interop):

- TFRecord files written by npm's `tfrecord` (tests/tools/tfrecord-writer, pinned in its
  package-lock.json and installed by scripts/install-deps.sh): ImageNet's
  `train-00000-of-01024`, TensorFlow Datasets' `mnist-train.tfrecord-00000-of-00001` beside its
  JSON files, Kaggle's `kaggle.tfrec` with an Example whose lists are empty;
- WebDataset tars written by Python's tarfile (what webdataset's ShardWriter uses) as
  `shard-000000`, `shard-000001`.

Each is converted with `stoker convert` (folders and single files), read back with Python's
`stoker.dataset` and, straight from the files, `stoker.tfrecord` / `stoker.tar`, and every field
is compared byte for byte with what the writer put in (docs/format.md's mapping of an Example to
fields). Then the errors: a file that is not what --input-format says, a random binary named
.tfrecord, a damaged shard named like the others.

Usage: tfrecord_interop_test.py STOKER SOURCE_DIR   (PYTHONPATH holds the built stoker package)
Exit 77 (CTest: skipped) when node is not installed.
"""
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile

STOKER, SOURCE_DIR = sys.argv[1], sys.argv[2]
WRITER_DIR = os.path.join(SOURCE_DIR, "tests", "tools", "tfrecord-writer")


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def run(*args, ok=True):
    r = subprocess.run([STOKER, *args], capture_output=True, text=True, timeout=300)
    if ok and r.returncode != 0:
        fail(f"stoker {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    if not ok and r.returncode == 0:
        fail(f"stoker {' '.join(args)} succeeded; expected an error:\n{r.stdout}")
    return r


def stem(name):
    """docs/format.md: the name up to its first '.', TFDS's shard suffix kept."""
    head, dot, rest = name.partition(".")
    for ext in ("tfrecords-", "tfrecord-", "tfrec-", "tfr-"):
        if dot and rest.startswith(ext) and "." not in rest:
            return head + "-" + rest[len(ext):]
    return head


def expected_samples(manifest):
    """{path: [(key, {field: bytes})]} from what the writer wrote, by docs/format.md's rules."""
    out = {}
    for f in manifest["files"]:
        samples = []
        for number, example in enumerate(f["examples"]):
            key = f"{stem(os.path.basename(f['path']))}/{number:08d}"
            fields = {}
            for name, feature in example.items():
                kind, values = feature["kind"], feature["values"]
                if name == "__key__" and kind == "bytes" and len(values) == 1:
                    key = bytes.fromhex(values[0]).decode()
                    continue
                if kind == "bytes":
                    if len(values) == 1:
                        fields[name] = bytes.fromhex(values[0])
                    elif not values:
                        fields[name] = b""
                    else:
                        for i, v in enumerate(values):
                            fields[f"{name}.{i}"] = bytes.fromhex(v)
                elif kind == "int64":
                    fields[name] = " ".join(values).encode()
                else:
                    fields[name] = " ".join("%.9g" % v for v in values).encode()
            samples.append((key, fields))
        out[f["path"]] = samples
    return out


def read_back(pipe):
    """{key: {field: bytes}} of an unbatched pipeline, as a user iterates it."""
    got = {}
    for element in pipe:
        keys = element["__keys__"]
        if len(keys) != 1:
            fail(f"an unbatched element has keys {keys}")
        fields = {name: value.tobytes() for name, value in element.items() if name != "__keys__"}
        if keys[0] in got:
            fail(f"key {keys[0]} read twice")
        got[keys[0]] = fields
    return got


def compare(what, got, want):
    want = dict(want)
    if sorted(got) != sorted(want):
        fail(f"{what}: keys {sorted(got)[:5]}... differ from the writer's {sorted(want)[:5]}...")
    for key, fields in want.items():
        if sorted(got[key]) != sorted(fields):
            fail(f"{what}: sample {key} has fields {sorted(got[key])}; the writer wrote "
                 f"{sorted(fields)}")
        for name, value in fields.items():
            if got[key][name] != value:
                fail(f"{what}: sample {key} field {name}: {len(got[key][name])} bytes "
                     f"{got[key][name][:40]!r} differ from the writer's {len(value)} bytes "
                     f"{value[:40]!r}")
    return sum(len(f) for f in want.values())


def write_wds(folder, shards, per_shard, rng):
    """WebDataset shards named shard-%06d (no extension), written by tarfile as webdataset's
    TarWriter does: members <key>.jpg, <key>.cls, <key>.json."""
    os.makedirs(folder)
    want = {}
    for shard in range(shards):
        with tarfile.open(os.path.join(folder, "shard-%06d" % shard), "w") as tar:
            for i in range(per_shard):
                key = f"sample{shard * per_shard + i:06d}"
                fields = {"jpg": rng.randbytes(1000 + 331 * i), "cls": str(i % 7).encode(),
                          "json": json.dumps({"i": i}).encode()}
                for field, data in fields.items():
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(data)
                    info.mtime = 1700000000
                    tar.addfile(info, io.BytesIO(data))
                want[key] = fields
    return want


def main():
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        print("SKIP: node is not installed, so no TFRecord files can be written by npm's tfrecord "
              "(scripts/install-deps.sh installs Debian's nodejs)")
        sys.exit(77)
    if not os.path.isdir(os.path.join(WRITER_DIR, "node_modules", "tfrecord")):
        fail(f"{WRITER_DIR}/node_modules lacks the npm package tfrecord: run scripts/install-deps.sh")
    import stoker

    work = tempfile.mkdtemp(prefix="stoker-tfrecord-interop-")
    try:
        src = os.path.join(work, "in")
        r = subprocess.run([node, os.path.join(WRITER_DIR, "write_tfrecords.js"), src],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            fail(f"the npm tfrecord writer failed:\n{r.stdout}{r.stderr}")
        with open(os.path.join(src, "expected.json")) as f:
            manifest = json.load(f)
        os.remove(os.path.join(src, "expected.json"))
        want = expected_samples(manifest)
        checked = 0

        # Each file on its own, under its own name, converted and read back.
        for path, samples in want.items():
            ds = os.path.join(work, "one-" + os.path.basename(path))
            out = run("convert", os.path.join(src, path), ds).stdout
            if f"converted {len(samples)} samples" not in out or "TFRecord file(s)" not in out:
                fail(f"stoker convert {path}: {out}")
            checked += compare(f"{path} converted", read_back(stoker.dataset(ds)), samples)
            # Read straight from the file by a pipeline: the same fields.
            checked += compare(f"{path} streamed",
                               read_back(stoker.tfrecord([os.path.join(src, path)])), samples)
            inspect = run("inspect", os.path.join(src, path)).stdout
            if "format: TFRecord" not in inspect or f"samples: {len(samples)}" not in inspect:
                fail(f"stoker inspect {path}:\n{inspect}")

        # The folders as the tools leave them.
        for folder in ("imagenet", "tfds"):
            ds = os.path.join(work, "ds-" + folder)
            out = run("convert", os.path.join(src, folder), ds).stdout
            expected = [s for p, samples in want.items() if p.startswith(folder + "/")
                        for s in samples]
            if f"converted {len(expected)} samples" not in out:
                fail(f"stoker convert {folder}: {out}")
            if folder == "tfds" and ("left out 2 file(s) that are neither TFRecord nor WebDataset "
                                     "tar: dataset_info.json, features.json") not in out:
                fail(f"stoker convert tfds did not report the JSON files it left out:\n{out}")
            checked += compare(f"{folder} converted", read_back(stoker.dataset(ds)), expected)
        # Told outright, and told wrong: the first file is named with why.
        run("convert", "--input-format", "tfrecord", os.path.join(src, "imagenet"),
            os.path.join(work, "ds-told"))
        err = run("convert", "--input-format", "wds", os.path.join(src, "imagenet"),
                  os.path.join(work, "ds-wrong"), ok=False).stderr
        first = os.path.join(src, "imagenet", "train-00000-of-01024")
        if f"{first}: asked for as a WebDataset tar file" not in err or "it is a TFRecord" not in err:
            fail(f"--input-format wds on TFRecord files:\n{err}")

        # The empty lists are empty fields, in the dataset and in the stream.
        kaggle = dict(want["kaggle/kaggle.tfrec"])
        empty = kaggle["kaggle/00000001"]
        if any(empty[name] != b"" for name in ("empty_bytes", "empty_ints", "empty_floats")):
            fail(f"the writer's empty lists are not empty fields in the expectation: {empty}")

        # WebDataset tars without an extension.
        rng = random.Random(28)
        wds_want = write_wds(os.path.join(work, "wds"), 2, 5, rng)
        out = run("convert", os.path.join(work, "wds"), os.path.join(work, "ds-wds")).stdout
        if "converted 10 samples" not in out or "WebDataset tar file(s)" not in out:
            fail(f"stoker convert wds: {out}")
        checked += compare("wds converted", read_back(stoker.dataset(os.path.join(work, "ds-wds"))),
                           wds_want)
        checked += compare("wds streamed", read_back(stoker.tar(
            [os.path.join(work, "wds", n) for n in sorted(os.listdir(os.path.join(work, "wds")))])),
            wds_want)
        run("convert", "--input-format", "tar", os.path.join(work, "wds", "shard-000001"),
            os.path.join(work, "ds-wds1"))

        # Damage: a random binary named .tfrecord, a damaged shard named like the others.
        bad = os.path.join(work, "bad", "random.tfrecord")
        os.makedirs(os.path.dirname(bad))
        with open(bad, "wb") as f:
            f.write(rng.randbytes(3000))
        err = run("convert", bad, os.path.join(work, "ds-bad"), ok=False).stderr
        if f"{bad}: named like a TFRecord file" not in err or "offset 8" not in err:
            fail(f"a random binary named .tfrecord:\n{err}")
        shutil.copytree(os.path.join(src, "imagenet"), os.path.join(work, "damaged"))
        damaged = os.path.join(work, "damaged", "train-00001-of-01024")
        with open(damaged, "r+b") as f:
            f.write(b"\xff")  # the first byte of the first record's length
        err = run("convert", os.path.join(work, "damaged"), os.path.join(work, "ds-damaged"),
                  ok=False).stderr
        if f"{damaged}: named like the other TFRecord files" not in err or "offset 8" not in err:
            fail(f"a damaged shard was not named:\n{err}")
        print(f"tfrecord interop: OK ({checked} fields compared byte for byte)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


main()
