// Writes TFRecord files of tf.train.Example records with a writer that is not stoker's (npm
// `tfrecord`, pinned in package-lock.json; installed by scripts/install-deps.sh), under the names
// other tools give them, and OUT/expected.json: every feature of every Example, as written.
//
//   node tests/tools/tfrecord-writer/write_tfrecords.js OUT
//
// OUT/imagenet/train-0000{0,1}-of-01024   ImageNet's TFRecords (inception's build_imagenet_data)
// OUT/tfds/mnist-train.tfrecord-00000-of-00001 + dataset_info.json, features.json (TFDS)
// OUT/kaggle/kaggle.tfrec                 Kaggle's, with an Example whose lists are empty
//
// expected.json: {"files": [{"path": "imagenet/train-00000-of-01024", "examples": [{NAME:
// {"kind": "bytes" | "int64" | "float", "values": [...]}}]}], "other_files": [...]}; bytes as hex,
// int64 as decimal strings, floats as the float32 value each was stored as.
"use strict";
const fs = require("fs");
const path = require("path");
const tfrecord = require("tfrecord");

const out = process.argv[2];
if (!out) {
  console.error("usage: write_tfrecords.js OUT");
  process.exit(2);
}

// Deterministic bytes (xorshift32), so a failure can be reproduced.
let state = 0x9e3779b9;
function randomBytes(n) {
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; ++i) {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    bytes[i] = state & 0xff;
  }
  return bytes;
}

const hex = (bytes) => Buffer.from(bytes).toString("hex");
const text = (s) => new Uint8Array(Buffer.from(s, "utf8"));

// An Example built with the package's builder, and what it holds.
function example(features) {
  const builder = tfrecord.createBuilder();
  const expected = {};
  for (const [name, [kind, values]] of Object.entries(features)) {
    if (kind === "bytes") {
      // protobufjs's fromObject drops a zero-length Uint8Array (it tests .length) but decodes
      // "" (base64) to an empty value.
      builder.setBinaries(name, values.map((v) => (v.length === 0 ? "" : v)));
      expected[name] = { kind, values: values.map(hex) };
    } else if (kind === "int64") {
      // Strings reach protobufjs's Long parsing: the full int64 range.
      builder.setIntegers(name, values);
      expected[name] = { kind, values: values.map(String) };
    } else {
      builder.setFloats(name, values);
      expected[name] = { kind, values: values.map(Math.fround) };
    }
  }
  return { example: builder.releaseExample(), expected };
}

async function writeFile(rel, examples, manifest) {
  const file = path.join(out, rel);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const writer = await tfrecord.createWriter(file);
  const written = [];
  for (const e of examples) {
    await writer.writeExample(e.example);
    written.push(e.expected);
  }
  await writer.close();
  manifest.files.push({ path: rel, examples: written });
}

async function main() {
  const manifest = { files: [], other_files: [] };
  // ImageNet, as inception's build_imagenet_data.py writes it.
  for (let shard = 0; shard < 2; ++shard) {
    const examples = [];
    for (let i = 0; i < 6; ++i) {
      const label = shard * 6 + i + 1;
      examples.push(example({
        "image/encoded": ["bytes", [randomBytes(3000 + 997 * i)]],
        "image/format": ["bytes", [text("JPEG")]],
        "image/filename": ["bytes", [text(`n0144${label}_${i}.JPEG`)]],
        "image/class/label": ["int64", [label]],
        "image/class/synset": ["bytes", [text("n01440764")]],
        "image/height": ["int64", [375]],
        "image/width": ["int64", [500]],
        "image/object/bbox/xmin": ["float", [0.1, 0.25 * i]],
        "image/object/bbox/label": ["int64", []],
      }));
    }
    await writeFile(`imagenet/train-0000${shard}-of-01024`, examples, manifest);
  }
  // TensorFlow Datasets' MNIST, with the JSON files TFDS keeps beside the shards.
  const mnist = [];
  for (let i = 0; i < 10; ++i) {
    mnist.push(example({ image: ["bytes", [randomBytes(200 + i)]], label: ["int64", [i % 10]] }));
  }
  await writeFile("tfds/mnist-train.tfrecord-00000-of-00001", mnist, manifest);
  for (const name of ["dataset_info.json", "features.json"]) {
    fs.writeFileSync(path.join(out, "tfds", name), JSON.stringify({ name: "mnist" }));
    manifest.other_files.push(`tfds/${name}`);
  }
  // Kaggle's .tfrec, with an Example whose lists are all empty and one with several values,
  // int64 extremes, float32 rounding, an empty bytes value and a __key__.
  const kaggle = [
    example({
      image: ["bytes", [randomBytes(5000)]],
      image_name: ["bytes", [text("Train_0")]],
      target: ["int64", [0]],
    }),
    example({
      empty_bytes: ["bytes", []],
      empty_ints: ["int64", []],
      empty_floats: ["float", []],
      image_name: ["bytes", [text("Train_1")]],
    }),
    example({
      __key__: ["bytes", [text("kaggle/custom-key")]],
      tags: ["bytes", [text("a"), new Uint8Array(0), randomBytes(17)]],
      one_empty: ["bytes", [new Uint8Array(0)]],
      extremes: ["int64", ["-9223372036854775808", "9223372036854775807", "-1", "0"]],
      floats: ["float", [3.14, -2.5, 1e30, 0.1, 16777217, 1.17549435e-38, 1e-45]],
    }),
  ];
  await writeFile("kaggle/kaggle.tfrec", kaggle, manifest);
  fs.writeFileSync(path.join(out, "expected.json"), JSON.stringify(manifest, null, 1));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
