#include "stoker/format/sample_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "stoker/core/strings.h"
#include "stoker/example.pb.h"
#include "stoker/format/manifest.h"
#include "stoker/format/shard_format.h"
#include "stoker/format/tar.h"
#include "stoker/format/tar_test_util.h"
#include "stoker/format/tfrecord.h"
#include "stoker/io/url.h"
#include "stoker/testing/subprocess.h"

namespace stoker::format {
namespace {

using ::testing::HasSubstr;

void WriteFile(const std::string& path, std::string_view bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<Sample> ReadAll(std::string_view url, StreamOptions options = {}) {
  auto stream = OpenSampleStream(url, options);
  EXPECT_TRUE(stream.ok()) << stream.status();
  std::vector<Sample> out;
  if (!stream.ok()) return out;
  while (true) {
    auto sample = (*stream)->Next();
    EXPECT_TRUE(sample.ok()) << sample.status();
    if (!sample.ok() || !sample->has_value()) break;
    out.push_back(std::move(**sample));
  }
  return out;
}

absl::Status Drain(std::string_view url, StreamOptions options = {}) {
  auto stream = OpenSampleStream(url, options);
  if (!stream.ok()) return stream.status();
  while (true) {
    auto sample = (*stream)->Next();
    if (!sample.ok()) return sample.status();
    if (!sample->has_value()) return absl::OkStatus();
  }
}

Sample MakeSample(int i) {
  Sample s;
  s.key = StrCat("sample", i);
  s.fields.push_back({"cls", Buffer::Copy(std::to_string(i % 3))});
  s.fields.push_back({"txt", Buffer::Copy(std::string(i * 1000, static_cast<char>('a' + i % 26)))});
  return s;
}

TEST(TfRecordTest, WriterAndStreamRoundTrip) {
  auto writer = tfrecord::TfRecordWriter::Open("mem://tfr/a.tfrecord");
  ASSERT_TRUE(writer.ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*writer)->WriteSample(MakeSample(i)).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  StreamOptions options;
  options.chunk_bytes = 4096;  // records span chunks
  std::vector<Sample> samples = ReadAll("mem://tfr/a.tfrecord", options);
  ASSERT_EQ(samples.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(samples[i].key, MakeSample(i).key);
    EXPECT_EQ(samples[i].fields, MakeSample(i).fields);
    EXPECT_EQ(samples[i].index, static_cast<uint64_t>(i));
  }
}

TEST(TfRecordTest, DecodesTensorFlowStyleExamples) {
  tfexample::Example example;
  auto& features = *example.mutable_features()->mutable_feature();
  features["image/encoded"].mutable_bytes_list()->add_value("JPEGBYTES");
  features["image/class/label"].mutable_int64_list()->add_value(417);
  features["bbox"].mutable_float_list()->add_value(0.5f);
  features["bbox"].mutable_float_list()->add_value(0.25f);
  features["tags"].mutable_bytes_list()->add_value("a");
  features["tags"].mutable_bytes_list()->add_value("b");
  std::string file;
  tfrecord::AppendRecord(example.SerializeAsString(), &file);
  tfrecord::AppendRecord(example.SerializeAsString(), &file);
  auto target = io::OpenUrl("mem://tfr/train-00000-of-00001.tfrecord");
  ASSERT_TRUE(target->store->Put(target->key, Buffer::FromString(file)).ok());
  std::vector<Sample> samples = ReadAll("mem://tfr/train-00000-of-00001.tfrecord");
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].key, "train-00000-of-00001/00000001");
  EXPECT_EQ(samples[0].Find("image/encoded")->view(), "JPEGBYTES");
  EXPECT_EQ(samples[0].Find("image/class/label")->view(), "417");
  EXPECT_EQ(samples[0].Find("bbox")->view(), "0.5 0.25");
  EXPECT_EQ(samples[0].Find("tags.0")->view(), "a");
  EXPECT_EQ(samples[0].Find("tags.1")->view(), "b");
}

TEST(TfRecordTest, EmptyListsAreEmptyFields) {
  tfexample::Example example;
  auto& features = *example.mutable_features()->mutable_feature();
  features["bytes"].mutable_bytes_list();
  features["ints"].mutable_int64_list();
  features["floats"].mutable_float_list();
  features["one_empty_value"].mutable_bytes_list()->add_value("");
  auto sample = tfrecord::ExampleToSample(example.SerializeAsString(), "k");
  ASSERT_TRUE(sample.ok()) << sample.status();
  ASSERT_EQ(sample->fields.size(), 4u);
  for (const char* name : {"bytes", "ints", "floats", "one_empty_value"}) {
    ASSERT_NE(sample->Find(name), nullptr) << name;
    EXPECT_EQ(sample->Find(name)->size(), 0u) << name;
  }
}

TEST(TfRecordTest, CorruptDataIsDataLossOrSkipped) {
  std::string file;
  for (int i = 0; i < 3; ++i)
    tfrecord::AppendRecord(tfrecord::SampleToExample(MakeSample(i + 1)), &file);
  // Flip a byte in the second record's data.
  size_t first = 12 + tfrecord::SampleToExample(MakeSample(1)).size() + 4;
  file[first + 12 + 5] ^= 1;
  auto target = io::OpenUrl("mem://tfr/bad.tfrecord");
  ASSERT_TRUE(target->store->Put(target->key, Buffer::FromString(file)).ok());
  absl::Status status = Drain("mem://tfr/bad.tfrecord");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("mem://tfr/bad.tfrecord"));
  EXPECT_THAT(status.message(), HasSubstr(StrCat("offset ", first)));
  StreamOptions skip;
  skip.on_corrupt = OnCorrupt::kSkip;
  skip.report = std::make_shared<CorruptionReport>();
  std::vector<Sample> samples = ReadAll("mem://tfr/bad.tfrecord", skip);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].key, "sample3");
  EXPECT_EQ(skip.report->count(), 1u);
  // A length that claims more than the file holds fails without allocating it.
  std::string absurd;
  tfrecord::AppendRecord(std::string(10, 'x'), &absurd);
  absurd[5] = 0x7f;  // length ~ 2^47, its CRC now wrong
  target = io::OpenUrl("mem://tfr/absurd.tfrecord");
  ASSERT_TRUE(target->store->Put(target->key, Buffer::FromString(absurd)).ok());
  EXPECT_EQ(Drain("mem://tfr/absurd.tfrecord").code(), absl::StatusCode::kDataLoss);
}

TEST(TarTest, ReadsAGnuTarWebDataset) {
  testing::ScopedTempDir dir("stoker-stream");
  std::string src = dir.path() + "/src";
  for (int i = 0; i < 5; ++i) {
    WriteFile(StrCat(src, "/train/s", i, ".jpg"), std::string(700 * i + 3, static_cast<char>(i)));
    WriteFile(StrCat(src, "/train/s", i, ".cls"), std::to_string(i % 2));
    if (i == 2) WriteFile(StrCat(src, "/train/s", i, ".meta.json"), "{}");
  }
  // A long path needs GNU tar's long-name records (or pax).
  std::string long_dir = std::string(120, 'd');
  WriteFile(StrCat(src, "/", long_dir, "/x.txt"), "long");
  std::string tar_path = dir.path() + "/shard.tar";
  ASSERT_EQ(
      std::system(
          StrCat("cd ", src, " && tar --sort=name -cf ", tar_path, " train ", long_dir).c_str()),
      0);
  StreamOptions options;
  options.chunk_bytes = 4096;
  std::vector<Sample> samples = ReadAll(tar_path, options);
  ASSERT_EQ(samples.size(), 6u);
  EXPECT_EQ(samples[5].key, StrCat(long_dir, "/x"));
  EXPECT_EQ(samples[5].Find("txt")->view(), "long");
  for (int i = 0; i < 5; ++i) {
    const Sample& s = samples[i];
    EXPECT_EQ(s.key, StrCat("train/s", i));
    EXPECT_EQ(s.Find("jpg")->view(), std::string(700 * i + 3, static_cast<char>(i)));
    EXPECT_EQ(s.Find("cls")->view(), std::to_string(i % 2));
  }
  EXPECT_EQ(samples[2].Find("meta.json")->view(), "{}");
}

TEST(TarTest, RejectsAbsoluteAndParentPaths) {
  testing::ScopedTempDir dir("stoker-stream");
  WriteFile(dir.path() + "/a/x.txt", "x");
  std::string abs_tar = dir.path() + "/abs.tar";
  ASSERT_EQ(
      std::system(StrCat("tar -cPf ", abs_tar, " ", dir.path(), "/a/x.txt 2>/dev/null").c_str()),
      0);
  absl::Status status = Drain(abs_tar);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("absolute path"));
  std::string dotdot_tar = dir.path() + "/dotdot.tar";
  ASSERT_EQ(
      std::system(StrCat("cd ", dir.path(), "/a && tar -cPf ", dotdot_tar, " ../a/x.txt").c_str()),
      0);
  status = Drain(dotdot_tar);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'..'"));
}

TEST(TarTest, AbsurdSizesAndBadChecksumsAreDataLoss) {
  auto target = io::OpenUrl("mem://tar/absurd.tar");
  ASSERT_TRUE(
      target->store->Put(target->key, Buffer::FromString(TarHeader("a.txt", "77777777777"))).ok());
  absl::Status status = Drain("mem://tar/absurd.tar");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("claims"));
  std::string bad = TarHeader("a.txt", "00000000001") + std::string(512, 'x');
  bad[0] = 'b';
  target = io::OpenUrl("mem://tar/bad.tar");
  ASSERT_TRUE(target->store->Put(target->key, Buffer::FromString(bad)).ok());
  status = Drain("mem://tar/bad.tar");
  EXPECT_THAT(status.message(), HasSubstr("checksum mismatch"));
  EXPECT_THAT(status.message(), HasSubstr("offset 0"));
}

TEST(TarTest, SplitsKeysAndFieldsLikeWebDataset) {
  EXPECT_EQ(tar::SplitKeyField("train/n0144.jpg").key, "train/n0144");
  EXPECT_EQ(tar::SplitKeyField("train/n0144.seg.png").field, "seg.png");
  EXPECT_EQ(tar::SplitKeyField("a.b/c.txt").key, "a.b/c");
  EXPECT_EQ(*tar::CleanPath("./x/y.jpg", "u", 0), "x/y.jpg");
  EXPECT_FALSE(tar::CleanPath("x/../../y.jpg", "u", 0).ok());
  EXPECT_TRUE(tar::CleanPath("x/..y.jpg", "u", 0).ok());
}

TEST(StreamTest, ConcatenatesUrlsAndDetectsFormats) {
  for (int f = 0; f < 2; ++f) {
    auto writer = tfrecord::TfRecordWriter::Open(StrCat("mem://cat/part", f, ".tfrecord"));
    ASSERT_TRUE(writer.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*writer)->WriteSample(MakeSample(f * 3 + i)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto stream = OpenSampleStreams({"mem://cat/part0.tfrecord", "mem://cat/part1.tfrecord"});
  for (uint64_t i = 0; i < 6; ++i) {
    auto sample = stream->Next();
    ASSERT_TRUE(sample.ok() && sample->has_value());
    EXPECT_EQ((*sample)->key, MakeSample(i).key);
    EXPECT_EQ((*sample)->index, i);
  }
  EXPECT_FALSE(stream->Next()->has_value());
  EXPECT_EQ(DetectStreamFormat("x.zip").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenSampleStream("mem://cat/missing.tar").status().code(), absl::StatusCode::kNotFound);
}

// The fuzzers' seed corpus holds valid inputs (so fuzzing starts deep inside the parsers).
TEST(StreamTest, FuzzSeedsAreValid) {
  const char* root = std::getenv("STOKER_SOURCE_DIR");
  if (root == nullptr) root = STOKER_FORMAT_TEST_SOURCE_DIR;
  auto read = [&](std::string_view rel) {
    std::ifstream in(StrCat(root, "/tests/fuzz/corpus/", rel), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto record = shard::DecodeRecord(Buffer::FromString(read("shard_record_fuzzer/valid")), "u", 16,
                                    "cat/001");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->Find("cls")->view(), "3");
  auto example = tfrecord::ExampleToSample(read("example_fuzzer/example"), "default");
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(example->key, "key0");
  EXPECT_EQ(example->Find("label")->view(), "7 300");
  EXPECT_EQ(StrCat(root, "/tests/fuzz/corpus/tfrecord_fuzzer/two_records").empty(), false);
  auto target = io::OpenUrl("mem://seeds/two.tfrecord");
  ASSERT_TRUE(
      target->store->Put(target->key, Buffer::FromString(read("tfrecord_fuzzer/two_records")))
          .ok());
  EXPECT_EQ(ReadAll("mem://seeds/two.tfrecord").size(), 2u);
  target = io::OpenUrl("mem://seeds/gnu.tar");
  ASSERT_TRUE(target->store->Put(target->key, Buffer::FromString(read("tar_fuzzer/gnu.tar"))).ok());
  EXPECT_EQ(ReadAll("mem://seeds/gnu.tar").size(), 2u);
  // Written by other tools: npm's tfrecord (an Example with empty lists), Python's tarfile.
  target = io::OpenUrl("mem://seeds/npm.tfrec");
  ASSERT_TRUE(
      target->store
          ->Put(target->key, Buffer::FromString(read("tfrecord_fuzzer/npm_tfrecord_empty_lists")))
          .ok());
  std::vector<Sample> npm = ReadAll("mem://seeds/npm.tfrec");
  ASSERT_EQ(npm.size(), 3u);
  ASSERT_NE(npm[1].Find("empty_bytes"), nullptr);
  EXPECT_EQ(npm[1].Find("empty_bytes")->size(), 0u);
  target = io::OpenUrl("mem://seeds/shard-000000");
  ASSERT_TRUE(
      target->store->Put(target->key, Buffer::FromString(read("tar_fuzzer/python_tarfile_shard")))
          .ok());
  EXPECT_EQ(ReadAll("mem://seeds/shard-000000").size(), 2u);
  auto manifest = ParseManifest(read("manifest_fuzzer/valid.json"), "u");
  EXPECT_TRUE(manifest.ok()) << manifest.status();
}

}  // namespace
}  // namespace stoker::format
