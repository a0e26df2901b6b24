#include "stoker/format/shard_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace stoker::format::shard {
namespace {

using ::testing::HasSubstr;

Sample MakeSample(std::string key, std::string jpg, std::string cls) {
  Sample s;
  s.key = std::move(key);
  s.fields.push_back({"cls", Buffer::Copy(cls)});
  s.fields.push_back({"jpg", Buffer::Copy(jpg)});
  return s;
}

TEST(ShardFormatTest, RecordRoundTripIsZeroCopy) {
  Sample in = MakeSample("cat/001", std::string(1000, 'x'), "3");
  std::string bytes;
  auto length = AppendRecord(in, 0, &bytes);
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(*length, bytes.size());
  Buffer record = Buffer::FromString(bytes);
  auto out = DecodeRecord(record, "mem://b/s.stk", 16, "cat/001");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->key, "cat/001");
  EXPECT_EQ(out->fields, in.fields);
  // The field is a slice of the record, not a copy.
  const Buffer* jpg = out->Find("jpg");
  ASSERT_NE(jpg, nullptr);
  EXPECT_GE(jpg->data(), record.data());
  EXPECT_LE(jpg->data() + jpg->size(), record.data() + record.size());
}

TEST(ShardFormatTest, CompressedRecordRoundTrips) {
  Sample in = MakeSample("dog/7", std::string(100000, 'a'), "12");
  std::string bytes;
  auto length = AppendRecord(in, 3, &bytes);
  ASSERT_TRUE(length.ok());
  EXPECT_LT(*length, 10000u);  // compressible payload got compressed
  auto out = DecodeRecord(Buffer::FromString(bytes), "u", 16, "dog/7");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->fields, in.fields);
}

TEST(ShardFormatTest, EveryFlippedBitIsDataLossNamingUrlOffsetAndKey) {
  Sample in = MakeSample("k/1", "payload bytes", "0");
  std::string bytes;
  ASSERT_TRUE(AppendRecord(in, 0, &bytes).ok());
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    std::string damaged = bytes;
    damaged[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    auto out = DecodeRecord(Buffer::FromString(damaged), "/data/s.stk", 4242, "k/1");
    ASSERT_FALSE(out.ok()) << "bit " << bit;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(out.status().message(), HasSubstr("/data/s.stk"));
    EXPECT_THAT(out.status().message(), HasSubstr("offset 4242"));
    EXPECT_THAT(out.status().message(), HasSubstr("k/1"));
  }
}

TEST(ShardFormatTest, KeyMismatchWithIndexIsDataLoss) {
  std::string bytes;
  ASSERT_TRUE(AppendRecord(MakeSample("a", "x", "0"), 0, &bytes).ok());
  auto out = DecodeRecord(Buffer::FromString(bytes), "u", 16, "b");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ShardFormatTest, RejectsSamplesTheFormatCannotHold) {
  std::string bytes;
  EXPECT_EQ(AppendRecord(MakeSample("", "x", "0"), 0, &bytes).status().code(),
            absl::StatusCode::kInvalidArgument);
  Sample repeated = MakeSample("a", "x", "0");
  repeated.fields.push_back({"jpg", Buffer::Copy("y")});
  EXPECT_EQ(AppendRecord(repeated, 0, &bytes).status().code(), absl::StatusCode::kInvalidArgument);
  Sample unnamed = MakeSample("a", "x", "0");
  unnamed.fields.push_back({"", Buffer::Copy("y")});
  EXPECT_EQ(AppendRecord(unnamed, 0, &bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardFormatTest, HeaderChecks) {
  std::string header;
  AppendHeader(&header);
  EXPECT_EQ(header.size(), kHeaderSize);
  EXPECT_TRUE(CheckHeader(header, "u").ok());
  std::string wrong_magic = header;
  wrong_magic[0] = 'X';
  EXPECT_THAT(CheckHeader(wrong_magic, "u").message(), HasSubstr("wrong magic"));
  std::string wrong_version = header;
  wrong_version[8] = 2;
  EXPECT_THAT(CheckHeader(wrong_version, "u").message(), HasSubstr("version 2"));
}

// Builds a whole shard in memory: header, records, index, footer.
std::string BuildShard(int records) {
  std::string shard;
  AppendHeader(&shard);
  std::string index;
  for (int i = 0; i < records; ++i) {
    uint64_t offset = shard.size();
    std::string key = "key" + std::to_string(i);
    auto length = AppendRecord(MakeSample(key, std::string(i * 10, 'z'), "1"), 0, &shard);
    AppendIndexEntry(offset, *length, key, &index);
  }
  Footer footer{shard.size(), index.size(), static_cast<uint64_t>(records)};
  shard += index;
  AppendFooter(footer, index, &shard);
  return shard;
}

TEST(ShardFormatTest, FooterAndIndexRoundTrip) {
  std::string shard = BuildShard(5);
  auto footer =
      ParseFooter(std::string_view(shard).substr(shard.size() - kFooterSize), shard.size(), "u");
  ASSERT_TRUE(footer.ok()) << footer.status();
  EXPECT_EQ(footer->record_count, 5u);
  std::vector<std::string> keys;
  absl::Status status = ParseIndex(
      std::string_view(shard).substr(footer->index_offset, footer->index_length), *footer, "u",
      [&](uint64_t, uint32_t, std::string_view key) { keys.emplace_back(key); });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(keys, ::testing::ElementsAre("key0", "key1", "key2", "key3", "key4"));
}

TEST(ShardFormatTest, TruncatedOrExtendedShardFailsAtTheFooter) {
  std::string shard = BuildShard(3);
  std::string truncated = shard.substr(0, shard.size() - 1);
  auto footer = ParseFooter(std::string_view(truncated).substr(truncated.size() - kFooterSize),
                            truncated.size(), "/x.stk");
  EXPECT_EQ(footer.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(footer.status().message(), HasSubstr("/x.stk"));
  std::string extended = shard + "junk";
  footer = ParseFooter(std::string_view(extended).substr(extended.size() - kFooterSize),
                       extended.size(), "/x.stk");
  EXPECT_EQ(footer.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ShardFormatTest, CorruptIndexIsCaughtByItsCrc) {
  std::string shard = BuildShard(3);
  auto footer =
      ParseFooter(std::string_view(shard).substr(shard.size() - kFooterSize), shard.size(), "u");
  ASSERT_TRUE(footer.ok());
  std::string index = shard.substr(footer->index_offset, footer->index_length);
  index[3] ^= 1;
  absl::Status status =
      ParseIndex(index, *footer, "u", [](uint64_t, uint32_t, std::string_view) {});
  EXPECT_THAT(status.message(), HasSubstr("index CRC32C mismatch"));
}

TEST(ShardFormatTest, AbsurdRecordCountIsRejectedBeforeAllocating) {
  std::string shard = BuildShard(1);
  Footer footer{16, shard.size() - 16 - kFooterSize, uint64_t{1} << 60};
  std::string forged = shard.substr(0, shard.size() - kFooterSize);
  AppendFooter(footer, "", &forged);
  auto parsed =
      ParseFooter(std::string_view(forged).substr(forged.size() - kFooterSize), forged.size(), "u");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace stoker::format::shard
