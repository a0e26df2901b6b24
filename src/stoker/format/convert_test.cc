#include "stoker/format/convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "stoker/core/strings.h"
#include "stoker/format/sharded_dataset.h"
#include "stoker/format/tfrecord.h"
#include "stoker/testing/subprocess.h"

namespace stoker::format {
namespace {

using ::testing::HasSubstr;

std::string Bytes(int seed, size_t size) {
  std::string s(size, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// key → field → bytes, for comparing a dataset with its source.
using Expected = std::map<std::string, std::map<std::string, std::string>>;

void ExpectDataset(const std::string& url, const Expected& expected) {
  auto ds = ShardedDataset::Open(url);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), expected.size());
  std::vector<uint64_t> all((*ds)->size());
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = all.size() - 1 - i;
  auto samples = (*ds)->ReadSamples(all);
  ASSERT_TRUE(samples.ok()) << samples.status();
  for (const Sample& s : *samples) {
    auto it = expected.find(s.key);
    ASSERT_NE(it, expected.end()) << s.key;
    std::map<std::string, std::string> fields;
    for (const Field& f : s.fields) fields[f.name] = f.value.ToString();
    EXPECT_EQ(fields, it->second) << s.key;
  }
  for (size_t shard = 0; shard < (*ds)->directory().shard_count(); ++shard) {
    EXPECT_TRUE(VerifyShard((*ds)->ShardUrl(shard)).ok());
  }
}

TEST(ConvertTest, FolderTree) {
  testing::ScopedTempDir dir("stoker-convert");
  Expected expected;
  std::vector<std::string> classes = {"zebra", "ant", "moose"};  // sorted: ant=0 moose=1 zebra=2
  std::map<std::string, int> index = {{"ant", 0}, {"moose", 1}, {"zebra", 2}};
  int seed = 0;
  for (const std::string& c : classes) {
    for (int i = 0; i < 12; ++i) {
      ++seed;
      std::string bytes = Bytes(seed, 2000 + seed * 37);
      WriteFile(StrCat(dir.path(), "/src/", c, "/img", i, ".jpg"), bytes);
      expected[StrCat(c, "/img", i)] = {{"jpg", bytes}, {"cls", std::to_string(index[c])}};
    }
  }
  WriteFile(dir.path() + "/src/ant/img3.json", "{\"a\":1}");
  expected["ant/img3"]["json"] = "{\"a\":1}";
  WriteFile(dir.path() + "/src/.DS_Store", "junk");
  ConvertProgress progress;
  ConvertOptions options;
  options.shard_bytes = 10000;
  options.progress = &progress;
  auto summary = Convert(dir.path() + "/src", dir.path() + "/out", options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->kind, SourceKind::kFolderTree);
  EXPECT_EQ(summary->manifest.total_samples, 36u);
  EXPECT_GT(summary->manifest.shards.size(), 3u);
  EXPECT_EQ(summary->manifest.fields, (std::vector<std::string>{"cls", "jpg", "json"}));
  EXPECT_EQ(progress.samples.load(), 36u);
  EXPECT_EQ(progress.shards.load(), summary->manifest.shards.size());
  ExpectDataset(dir.path() + "/out", expected);
}

TEST(ConvertTest, FolderTreeRecordsClassNamesAndEmptyClassFoldersKeepTheirIndex) {
  testing::ScopedTempDir dir("stoker-convert");
  // Sorted class folders, as torchvision's ImageFolder: ant=0, bee=1 (empty), cat=2.
  WriteFile(dir.path() + "/src/cat/c0.jpg", "c0");
  WriteFile(dir.path() + "/src/ant/a0.jpg", "a0");
  std::filesystem::create_directories(dir.path() + "/src/bee");
  std::filesystem::create_directories(dir.path() + "/src/.hidden");
  auto summary = Convert(dir.path() + "/src", dir.path() + "/out");
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<std::string> classes = {"ant", "bee", "cat"};
  EXPECT_EQ(summary->manifest.classes, classes);
  auto ds = ShardedDataset::Open(dir.path() + "/out/");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->manifest().classes, classes);
  ExpectDataset(dir.path() + "/out", {{"ant/a0", {{"jpg", "a0"}, {"cls", "0"}}},
                                      {"cat/c0", {{"jpg", "c0"}, {"cls", "2"}}}});
}

TEST(ConvertTest, FolderTreeMustHaveClassFolders) {
  testing::ScopedTempDir dir("stoker-convert");
  WriteFile(dir.path() + "/src/loose.jpg", "x");
  auto summary = Convert(dir.path() + "/src", dir.path() + "/out");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr("loose.jpg"));
}

TEST(ConvertTest, GnuTarWebDatasets) {
  testing::ScopedTempDir dir("stoker-convert");
  Expected expected;
  for (int part = 0; part < 3; ++part) {
    std::string folder = StrCat(dir.path(), "/wds", part);
    for (int i = 0; i < 10; ++i) {
      std::string key = StrCat("p", part, "/s", i);
      std::string jpg = Bytes(part * 100 + i, 1500 + i * 100);
      WriteFile(StrCat(folder, "/", key, ".jpg"), jpg);
      WriteFile(StrCat(folder, "/", key, ".cls"), std::to_string(i % 4));
      expected[key] = {{"jpg", jpg}, {"cls", std::to_string(i % 4)}};
    }
    ASSERT_EQ(std::system(StrCat("mkdir -p ", dir.path(), "/tars && cd ", folder,
                                 " && tar --sort=name -cf ", dir.path(), "/tars/part-", part,
                                 ".tar p", part)
                              .c_str()),
              0);
  }
  ConvertOptions options;
  options.shard_bytes = 8000;
  auto summary = Convert(dir.path() + "/tars", dir.path() + "/out", options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->kind, SourceKind::kTar);
  EXPECT_EQ(summary->inputs, 3u);
  EXPECT_EQ(summary->manifest.total_samples, 30u);
  ExpectDataset(dir.path() + "/out", expected);

  // One tar file on its own.
  summary = Convert(dir.path() + "/tars/part-1.tar", dir.path() + "/one");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->manifest.total_samples, 10u);
}

TEST(ConvertTest, TfRecordFiles) {
  testing::ScopedTempDir dir("stoker-convert");
  Expected expected;
  auto writer = tfrecord::TfRecordWriter::Open(dir.path() + "/in/train.tfrecord");
  ASSERT_TRUE(writer.ok());
  for (int i = 0; i < 25; ++i) {
    Sample s;
    s.key = StrCat("k", i);
    std::string bytes = Bytes(i, 900);
    s.fields.push_back({"jpg", Buffer::Copy(bytes)});
    ASSERT_TRUE((*writer)->WriteSample(s).ok());
    expected[s.key] = {{"jpg", bytes}};
  }
  ASSERT_TRUE((*writer)->Close().ok());
  ConvertOptions options;
  options.zstd_level = 3;
  auto summary = Convert(dir.path() + "/in", "mem://convert-tfr/out", options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->kind, SourceKind::kTfRecord);
  EXPECT_EQ(summary->manifest_url, "mem://convert-tfr/out/manifest.json");
  ExpectDataset("mem://convert-tfr/out", expected);
}

// TFRecord files of Examples keyed by __key__, written under any name.
Expected WriteTfRecord(const std::string& path, int first, int n) {
  Expected expected;
  auto writer = tfrecord::TfRecordWriter::Open(path);
  EXPECT_TRUE(writer.ok());
  for (int i = first; i < first + n; ++i) {
    Sample s;
    s.key = StrCat("k", i);
    std::string bytes = Bytes(i, 300 + i);
    s.fields.push_back({"jpg", Buffer::Copy(bytes)});
    EXPECT_TRUE((*writer)->WriteSample(s).ok());
    expected[s.key] = {{"jpg", bytes}};
  }
  EXPECT_TRUE((*writer)->Close().ok());
  return expected;
}

TEST(ConvertTest, TfRecordFilesAreRecognisedByContentWhateverTheirNames) {
  testing::ScopedTempDir dir("stoker-convert");
  Expected expected = WriteTfRecord(dir.path() + "/in/train-00000-of-00002", 0, 5);
  expected.merge(WriteTfRecord(dir.path() + "/in/train-00001-of-00002", 5, 5));
  expected.merge(WriteTfRecord(dir.path() + "/in/mnist-train.tfrecord-00000-of-00001", 10, 3));
  expected.merge(WriteTfRecord(dir.path() + "/in/kaggle.tfrec", 13, 2));
  // What TensorFlow Datasets keeps beside its shards: neither format, left out and counted.
  WriteFile(dir.path() + "/in/dataset_info.json", "{\"name\": \"mnist\"}");
  WriteFile(dir.path() + "/in/features.json", "{}");
  auto summary = Convert(dir.path() + "/in", dir.path() + "/out");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->kind, SourceKind::kTfRecord);
  EXPECT_EQ(summary->inputs, 4u);
  EXPECT_EQ(summary->unrecognised_files, 2u);
  EXPECT_EQ(summary->unrecognised_examples,
            (std::vector<std::string>{"dataset_info.json", "features.json"}));
  ExpectDataset(dir.path() + "/out", expected);

  // One file with no extension on its own.
  summary = Convert(dir.path() + "/in/train-00001-of-00002", dir.path() + "/one");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->kind, SourceKind::kTfRecord);
  EXPECT_EQ(summary->manifest.total_samples, 5u);

  // An empty shard of the set holds no samples; a damaged one is an error naming it.
  WriteFile(dir.path() + "/in/train-00002-of-00004", "");
  summary = Convert(dir.path() + "/in", dir.path() + "/out2");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->inputs, 5u);
  WriteFile(dir.path() + "/in/train-00003-of-00004", Bytes(1, 700));
  summary = Convert(dir.path() + "/in", dir.path() + "/out3");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(summary.status().message(),
              HasSubstr(dir.path() + "/in/train-00003-of-00004: named like the other TFRecord"));
  EXPECT_THAT(summary.status().message(), HasSubstr("offset 8"));
}

TEST(ConvertTest, TarsAreRecognisedByContentWhateverTheirNames) {
  testing::ScopedTempDir dir("stoker-convert");
  Expected expected;
  for (int part = 0; part < 2; ++part) {
    std::string folder = StrCat(dir.path(), "/wds", part);
    for (int i = 0; i < 4; ++i) {
      std::string key = StrCat("p", part, "/s", i);
      std::string jpg = Bytes(part * 100 + i, 700);
      WriteFile(StrCat(folder, "/", key, ".jpg"), jpg);
      expected[key] = {{"jpg", jpg}};
    }
    ASSERT_EQ(std::system(StrCat("mkdir -p ", dir.path(), "/tars && cd ", folder,
                                 " && tar --sort=name -cf ", dir.path(), "/tars/shard-00000", part,
                                 " p", part)
                              .c_str()),
              0);
  }
  auto summary = Convert(dir.path() + "/tars", dir.path() + "/out");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->kind, SourceKind::kTar);
  EXPECT_EQ(summary->inputs, 2u);
  ExpectDataset(dir.path() + "/out", expected);

  // Tars and TFRecord files together: convert them separately.
  WriteTfRecord(dir.path() + "/tars/extra", 0, 1);
  summary = Convert(dir.path() + "/tars", dir.path() + "/out2");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr("holds TFRecord files (extra) and WebDataset "
                                                    "tars (shard-000000)"));
}

TEST(ConvertTest, InputFormatSaysWhatEveryFileIs) {
  testing::ScopedTempDir dir("stoker-convert");
  WriteTfRecord(dir.path() + "/in/a", 0, 3);
  WriteTfRecord(dir.path() + "/in/b", 3, 3);
  ConvertOptions options;
  options.input_format = SourceKind::kTfRecord;
  auto summary = Convert(dir.path() + "/in", dir.path() + "/out", options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->manifest.total_samples, 6u);
  // Asked for tars: the first file is the error, and the message says what it is.
  options.input_format = SourceKind::kTar;
  summary = Convert(dir.path() + "/in", dir.path() + "/out2", options);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(),
              HasSubstr(dir.path() + "/in/a: asked for as a WebDataset tar file"));
  EXPECT_THAT(summary.status().message(), HasSubstr("it is a TFRecord"));
  // Asked for TFRecord, a stray file is an error too (nothing is left out when told).
  WriteFile(dir.path() + "/in/notes.txt", "hello");
  options.input_format = SourceKind::kTfRecord;
  summary = Convert(dir.path() + "/in", dir.path() + "/out3", options);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr(dir.path() + "/in/notes.txt: asked for as a "
                                                                 "TFRecord file"));
  EXPECT_THAT(summary.status().message(), HasSubstr("only 5 bytes"));
  // A file given to --input-format tree.
  options.input_format = SourceKind::kFolderTree;
  summary = Convert(dir.path() + "/in/a", dir.path() + "/out4", options);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseSourceKind("wds"), SourceKind::kTar);
  EXPECT_EQ(*ParseSourceKind("tree"), SourceKind::kFolderTree);
  EXPECT_FALSE(ParseSourceKind("zip").ok());
}

TEST(ConvertTest, FilesOfNeitherFormatAreErrorsWhenAlone) {
  testing::ScopedTempDir dir("stoker-convert");
  WriteFile(dir.path() + "/blob", Bytes(4, 2000));
  auto summary = Convert(dir.path() + "/blob", dir.path() + "/out");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr(dir.path() + "/blob: cannot tell its format"));
  WriteFile(dir.path() + "/random.tfrecord", Bytes(5, 2000));
  summary = Convert(dir.path() + "/random.tfrecord", dir.path() + "/out");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(),
              HasSubstr(dir.path() + "/random.tfrecord: named like a TFRecord file"));
  EXPECT_THAT(summary.status().message(), HasSubstr("offset 8"));
  // A folder tree with a file at its root is still refused as before (not sniffed away).
  WriteFile(dir.path() + "/tree/cats/a.jpg", Bytes(6, 100));
  WriteFile(dir.path() + "/tree/README", "about");
  summary = Convert(dir.path() + "/tree", dir.path() + "/out");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr("README is not of the form"));
}

}  // namespace
}  // namespace stoker::format
