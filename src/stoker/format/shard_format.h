// Encoding and decoding of the pieces of a stoker shard (docs/format.md is the specification):
// header, records, index and footer. Pure functions over bytes; no I/O.
//
// Errors: malformed input is DataLoss (InvalidArgument for a sample that cannot be encoded); every
// message starts with the shard URL and, for records, names the record offset and key.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "stoker/core/buffer.h"
#include "stoker/format/sample.h"

namespace stoker::format::shard {

inline constexpr std::string_view kHeaderMagic = "STKSHARD";
inline constexpr std::string_view kFooterMagic = "STKINDEX";
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kHeaderSize = 16;
inline constexpr uint64_t kFooterSize = 48;
inline constexpr uint64_t kRecordPrefixSize = 8;
inline constexpr uint64_t kMaxBodyLength = uint64_t{1} << 30;
inline constexpr uint8_t kFlagZstd = 1;

// Appends the 16-byte shard header to `out`.
void AppendHeader(std::string* out);
// Checks the first 16 bytes of a shard.
absl::Status CheckHeader(std::string_view bytes, std::string_view url);

// Appends `sample` as one record (prefix + body) to `out`; zstd_level > 0 compresses the payload
// when that makes it smaller. Returns the record's total length. InvalidArgument when the sample
// cannot be stored (empty or over-long key, bad or repeated field name, > 255 fields, > 1 GiB).
absl::StatusOr<uint32_t> AppendRecord(const Sample& sample, int zstd_level, std::string* out);

// Decodes one whole record (exactly `length` bytes as listed in the index) read from `url` at
// `offset`. Checks the CRC (unless `crc` is kAlreadyChecked: these very bytes passed it before),
// the structure and, when `expected_key` is non-empty, the key. Field values are slices of
// `record` unless the payload is compressed.
enum class RecordCrc { kCheck, kAlreadyChecked };
absl::StatusOr<Sample> DecodeRecord(const Buffer& record, std::string_view url, uint64_t offset,
                                    std::string_view expected_key,
                                    RecordCrc crc = RecordCrc::kCheck);

// Appends one index entry.
void AppendIndexEntry(uint64_t offset, uint32_t length, std::string_view key, std::string* out);

struct Footer {
  uint64_t index_offset = 0;
  uint64_t index_length = 0;
  uint64_t record_count = 0;
  uint32_t index_crc = 0;  // masked; filled by ParseFooter, computed by AppendFooter
};
// Appends the 48-byte footer (index_crc computed over `index`).
void AppendFooter(const Footer& footer, std::string_view index, std::string* out);
// Parses the last 48 bytes of a shard of `object_size` bytes; checks magic, version, footer CRC
// and that the index fits between the header and the footer.
absl::StatusOr<Footer> ParseFooter(std::string_view bytes, uint64_t object_size,
                                   std::string_view url);
// Parses the index (`index` is exactly footer.index_length bytes): checks index_crc, the entry
// count and contiguity, and calls `entry` for each record in order.
absl::Status ParseIndex(
    std::string_view index, const Footer& footer, std::string_view url,
    absl::FunctionRef<void(uint64_t offset, uint32_t length, std::string_view key)> entry);

// "<url>: record at offset <offset> (key <key>): <what>" as DataLoss.
absl::Status RecordError(std::string_view url, uint64_t offset, std::string_view key,
                         std::string_view what);

}  // namespace stoker::format::shard
