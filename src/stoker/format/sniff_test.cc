#include "stoker/format/sniff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/example.pb.h"
#include "stoker/format/crc32c.h"
#include "stoker/format/sample_stream.h"
#include "stoker/format/shard_format.h"
#include "stoker/format/tar.h"
#include "stoker/format/tar_test_util.h"
#include "stoker/format/tfrecord.h"
#include "stoker/io/url.h"

namespace stoker::format {
namespace {

using ::testing::HasSubstr;

std::string Random(int seed, size_t size) {
  std::string s(size, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A TFRecord file of `n` Examples, each with a bytes feature "jpg" and an int64 "label".
std::string TfRecordFile(int n) {
  std::string file;
  for (int i = 0; i < n; ++i) {
    tfexample::Example example;
    auto& features = *example.mutable_features()->mutable_feature();
    features["jpg"].mutable_bytes_list()->add_value(Random(i, 100 + i));
    features["label"].mutable_int64_list()->add_value(i);
    tfrecord::AppendRecord(example.SerializeAsString(), &file);
  }
  return file;
}

// A one-member ustar archive holding `name` with `data`, as tar writes it.
std::string TarFile(std::string_view name, std::string_view data) {
  char size[12];
  std::snprintf(size, sizeof(size), "%011o", static_cast<unsigned>(data.size()));
  return TarHeader(name, size) + std::string(data) + std::string(tar::Padding(data.size()), '\0') +
         std::string(1024, '\0');
}

std::string Head(std::string_view file) { return std::string(file.substr(0, kSniffBytes)); }

void Put(std::string_view url, std::string bytes) {
  auto target = io::OpenUrl(url);
  ASSERT_TRUE(target.ok()) << target.status();
  ASSERT_TRUE(target->store->Put(target->key, Buffer::FromString(std::move(bytes))).ok());
}

absl::StatusOr<std::vector<Sample>> ReadAll(std::string_view url, StreamOptions options = {}) {
  ASSIGN_OR_RETURN(auto stream, OpenSampleStream(url, options));
  std::vector<Sample> out;
  while (true) {
    ASSIGN_OR_RETURN(std::optional<Sample> sample, stream->Next());
    if (!sample.has_value()) return out;
    out.push_back(std::move(*sample));
  }
}

TEST(SniffTest, RecognisesEachFormatByItsFirstBytes) {
  std::string tfr = TfRecordFile(3);
  EXPECT_EQ(SniffFormat(Head(tfr), tfr.size()).format, StreamFormat::kTfRecord);
  std::string tar = TarFile("s0.jpg", "JPEG");
  EXPECT_EQ(SniffFormat(Head(tar), tar.size()).format, StreamFormat::kTar);
  std::string shard;
  shard::AppendHeader(&shard);
  EXPECT_EQ(SniffFormat(shard, 4096).format, StreamFormat::kShard);
  // A TFRecord file whose first record is empty (16 bytes in all) is one too.
  std::string tiny;
  tfrecord::AppendRecord("", &tiny);
  EXPECT_EQ(SniffFormat(tiny, tiny.size()).format, StreamFormat::kTfRecord);
}

TEST(SniffTest, SaysWhyAFileIsNeither) {
  Sniffed empty = SniffFormat("", 0);
  EXPECT_EQ(empty.format, StreamFormat::kAuto);
  EXPECT_THAT(empty.why_not, HasSubstr("empty file"));

  std::string random = Random(7, 5000);
  Sniffed r = SniffFormat(Head(random), random.size());
  EXPECT_EQ(r.format, StreamFormat::kAuto);
  EXPECT_THAT(r.why_not, HasSubstr("not a TFRecord (the length CRC32C at offset 8 is 0x"));
  EXPECT_THAT(r.why_not, HasSubstr("not a WebDataset tar (the header checksum"));

  // Truncated: fewer bytes than a header.
  Sniffed short_file = SniffFormat("abcde", 5);
  EXPECT_THAT(short_file.why_not, HasSubstr("only 5 bytes; a TFRecord record header takes 12"));
  EXPECT_THAT(short_file.why_not, HasSubstr("only 5 bytes; a tar header takes 512"));

  // A bad CRC on the first record's length.
  std::string bad = TfRecordFile(2);
  bad[9] ^= 0x40;
  Sniffed bad_crc = SniffFormat(Head(bad), bad.size());
  EXPECT_EQ(bad_crc.format, StreamFormat::kAuto);
  EXPECT_THAT(bad_crc.why_not, HasSubstr("length CRC32C at offset 8"));

  // A tar header with a bad checksum, and an all-zero block (an empty archive).
  std::string tar = TarFile("s0.jpg", "JPEG");
  tar[0] = 't';
  Sniffed bad_tar = SniffFormat(Head(tar), tar.size());
  EXPECT_EQ(bad_tar.format, StreamFormat::kAuto);
  EXPECT_THAT(bad_tar.why_not, HasSubstr("the header checksum at offset 148 is 0"));
  EXPECT_THAT(SniffFormat(std::string(512, '\0'), 10240).why_not, HasSubstr("zeros"));
  std::string not_octal(512, 'x');
  EXPECT_THAT(SniffFormat(not_octal, 512).why_not, HasSubstr("not an octal number"));

  // A length over 1 GiB whose CRC matches.
  std::string huge;
  std::string length(8, '\0');
  length[4] = 1;  // 2^32
  huge = length;
  uint32_t crc = crc32c::Mask(crc32c::Value(length));
  for (int i = 0; i < 4; ++i) huge.push_back(static_cast<char>(crc >> (8 * i)));
  EXPECT_THAT(SniffFormat(huge, 1 << 20).why_not, HasSubstr("more than 1 GiB"));

  // Compressed files are named as such.
  EXPECT_THAT(SniffFormat("\x1f\x8b\x08\x00" + Random(1, 600), 604).why_not,
              HasSubstr("gzip-compressed"));
}

TEST(SniffTest, NamesThatSayAFormat) {
  EXPECT_EQ(FormatFromName("a/train.tfrecord"), StreamFormat::kTfRecord);
  EXPECT_EQ(FormatFromName("a/train.tfrecords"), StreamFormat::kTfRecord);
  EXPECT_EQ(FormatFromName("kaggle.tfrec"), StreamFormat::kTfRecord);
  EXPECT_EQ(FormatFromName("x.tfr"), StreamFormat::kTfRecord);
  EXPECT_EQ(FormatFromName("s3://b/mnist-train.tfrecord-00000-of-00001"), StreamFormat::kTfRecord);
  EXPECT_EQ(FormatFromName("shard-000000.tar"), StreamFormat::kTar);
  EXPECT_EQ(FormatFromName("shard-00000.stk"), StreamFormat::kShard);
  for (std::string_view none : {"train-00000-of-01024", "shard-000000", "x.tfrecord-bak",
                                "a.tfrecord-1-of-", "a.tfrecord.d/b", "x.json"}) {
    EXPECT_EQ(FormatFromName(none), StreamFormat::kAuto) << none;
  }
}

TEST(SniffTest, DecidesOrSaysWhyNamingTheFileAndOffset) {
  std::string tfr = TfRecordFile(2);
  std::string tar = TarFile("s0.jpg", "JPEG");
  std::string random = Random(3, 2000);
  // By content when the name says nothing.
  EXPECT_EQ(*DecideFormat(Head(tfr), tfr.size(), "d/train-00000-of-01024", StreamFormat::kAuto),
            StreamFormat::kTfRecord);
  EXPECT_EQ(*DecideFormat(Head(tar), tar.size(), "d/shard-000000", StreamFormat::kAuto),
            StreamFormat::kTar);
  // A random binary named .tfrecord: the name is not enough.
  auto named = DecideFormat(Head(random), random.size(), "d/random.tfrecord", StreamFormat::kAuto);
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(named.status().message(), HasSubstr("d/random.tfrecord: named like a TFRecord file"));
  EXPECT_THAT(named.status().message(), HasSubstr("offset 8"));
  // A tar asked for as TFRecord: the message says what it is.
  auto asked = DecideFormat(Head(tar), tar.size(), "d/x", StreamFormat::kTfRecord);
  ASSERT_FALSE(asked.ok());
  EXPECT_THAT(asked.status().message(), HasSubstr("d/x: asked for as a TFRecord file"));
  EXPECT_THAT(asked.status().message(), HasSubstr("it is a WebDataset tar"));
  // Neither, with no name: both reasons and what to do.
  auto neither = DecideFormat(Head(random), random.size(), "d/blob", StreamFormat::kAuto);
  ASSERT_FALSE(neither.ok());
  EXPECT_THAT(neither.status().message(), HasSubstr("d/blob: cannot tell its format"));
  EXPECT_THAT(neither.status().message(), HasSubstr("--input-format"));
  // An empty file: no samples when the format is known, else no way to tell.
  EXPECT_EQ(*DecideFormat("", 0, "d/e", StreamFormat::kTar), StreamFormat::kTar);
  EXPECT_EQ(*DecideFormat("", 0, "d/e.tfrecord", StreamFormat::kAuto), StreamFormat::kTfRecord);
  auto empty = DecideFormat("", 0, "d/e", StreamFormat::kAuto);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("d/e: cannot tell its format"));
  EXPECT_THAT(empty.status().message(), HasSubstr("empty file"));
}

TEST(SniffTest, StreamsOpenFilesByContentWhateverTheirNames) {
  Put("mem://sniff/train-00000-of-01024", TfRecordFile(3));
  auto samples = ReadAll("mem://sniff/train-00000-of-01024");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ((*samples)[2].key, "train-00000-of-01024/00000002");
  // TensorFlow Datasets' names: the shard suffix stays in the key.
  Put("mem://sniff/mnist-train.tfrecord-00003-of-00004", TfRecordFile(1));
  samples = ReadAll("mem://sniff/mnist-train.tfrecord-00003-of-00004");
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)[0].key, "mnist-train-00003-of-00004/00000000");
  Put("mem://sniff/kaggle.tfrec", TfRecordFile(2));
  samples = ReadAll("mem://sniff/kaggle.tfrec");
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)[1].key, "kaggle/00000001");
  Put("mem://sniff/shard-000000", TarFile("s0.jpg", "JPEG"));
  samples = ReadAll("mem://sniff/shard-000000");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].Find("jpg")->view(), "JPEG");

  Put("mem://sniff/blob", Random(5, 3000));
  auto blob = ReadAll("mem://sniff/blob");
  EXPECT_EQ(blob.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(blob.status().message(), HasSubstr("mem://sniff/blob: cannot tell its format"));
}

TEST(SniffTest, ReadersToldTheWrongFormatSayWhatTheFileIs) {
  Put("mem://sniff/wrong", TarFile("s0.jpg", "JPEG"));
  StreamOptions as_tfrecord;
  as_tfrecord.format = StreamFormat::kTfRecord;
  auto read = ReadAll("mem://sniff/wrong", as_tfrecord);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("mem://sniff/wrong: TFRecord at offset 0"));
  EXPECT_THAT(read.status().message(), HasSubstr("the file is a WebDataset tar, not a TFRecord"));

  Put("mem://sniff/wrong2", TfRecordFile(40));
  StreamOptions as_tar;
  as_tar.format = StreamFormat::kTar;
  read = ReadAll("mem://sniff/wrong2", as_tar);
  EXPECT_THAT(read.status().message(), HasSubstr("mem://sniff/wrong2: tar header at offset 0"));
  EXPECT_THAT(read.status().message(), HasSubstr("the file is a TFRecord, not a WebDataset tar"));
}

TEST(SniffTest, DamagedFirstRecordsNameFileAndOffset) {
  // A bad CRC on the first record's data: recognised as TFRecord, the reader says where.
  std::string file = TfRecordFile(2);
  file[20] ^= 1;
  Put("mem://sniff/bad-data-00000-of-00002", file);
  auto read = ReadAll("mem://sniff/bad-data-00000-of-00002");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(),
              HasSubstr("mem://sniff/bad-data-00000-of-00002: TFRecord at offset 0: data CRC32C"));
  // Truncated inside the first record.
  Put("mem://sniff/cut.tfrecord", TfRecordFile(1).substr(0, 40));
  read = ReadAll("mem://sniff/cut.tfrecord");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("mem://sniff/cut.tfrecord: truncated TFRecord "
                                                 "at offset 0"));
  // A random binary named .tfrecord.
  Put("mem://sniff/random.tfrecord", Random(9, 4000));
  read = ReadAll("mem://sniff/random.tfrecord");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("mem://sniff/random.tfrecord: TFRecord at offset "
                                                 "0: length CRC32C mismatch"));
  // An empty file named as TFRecord holds no samples.
  Put("mem://sniff/empty.tfrecord", "");
  read = ReadAll("mem://sniff/empty.tfrecord");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
}

}  // namespace
}  // namespace stoker::format
