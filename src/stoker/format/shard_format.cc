#include "stoker/format/shard_format.h"

#include <zstd.h>

#include <cstring>
#include <set>

#include "stoker/core/little_endian.h"
#include "stoker/core/strings.h"
#include "stoker/format/crc32c.h"

namespace stoker::format::shard {
namespace {

// Reads fixed-width fields from a byte range, remembering whether it ran out.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}
  bool Take(size_t n, std::string_view* out) {
    if (n > bytes_.size() - pos_) return false;
    *out = bytes_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool U8(uint64_t* v) { return Int(1, v); }
  bool U16(uint64_t* v) { return Int(2, v); }
  bool U32(uint64_t* v) { return Int(4, v); }
  bool U64(uint64_t* v) { return Int(8, v); }
  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  bool Int(int n, uint64_t* v) {
    std::string_view s;
    if (!Take(n, &s)) return false;
    *v = LoadLittleEndian(s.data(), n);
    return true;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
};

absl::Status ShardError(std::string_view url, std::string_view what) {
  return absl::DataLossError(StrCat(url, ": ", what));
}

bool ValidFieldName(std::string_view name) {
  return !name.empty() && name.size() <= 255 && name.find('\0') == std::string_view::npos;
}

}  // namespace

absl::Status RecordError(std::string_view url, uint64_t offset, std::string_view key,
                         std::string_view what) {
  return absl::DataLossError(
      StrCat(url, ": record at offset ", offset, " (key ", key.empty() ? "?" : key, "): ", what));
}

void AppendHeader(std::string* out) {
  out->append(kHeaderMagic);
  AppendLittleEndian<uint32_t>(out, kVersion);
  AppendLittleEndian<uint32_t>(out, 0);
}

absl::Status CheckHeader(std::string_view bytes, std::string_view url) {
  if (bytes.size() < kHeaderSize) return ShardError(url, "shorter than a shard header (16 bytes)");
  if (bytes.substr(0, 8) != kHeaderMagic) {
    return ShardError(url, "not a stoker shard (wrong magic at offset 0)");
  }
  uint64_t version = LoadLittleEndian(bytes.data() + 8, 4);
  if (version != kVersion) {
    return ShardError(url, StrCat("shard format version ", version,
                                  " is not supported (this stoker reads version ", kVersion, ")"));
  }
  if (LoadLittleEndian(bytes.data() + 12, 4) != 0) return ShardError(url, "unknown header flags");
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> AppendRecord(const Sample& sample, int zstd_level, std::string* out) {
  auto invalid = [&](std::string_view what) {
    return absl::InvalidArgumentError(StrCat("sample ", sample.key, ": ", what));
  };
  if (sample.key.empty() || sample.key.size() > 65535) {
    return invalid("a key must have 1 to 65535 bytes");
  }
  if (sample.key.find('\0') != std::string::npos) return invalid("a key must not contain NUL");
  if (sample.fields.size() > 255) return invalid("more than 255 fields");
  std::set<std::string_view> names;
  uint64_t payload_size = 0;
  for (const Field& field : sample.fields) {
    if (!ValidFieldName(field.name)) {
      return invalid(StrCat("invalid field name '", field.name, "'"));
    }
    if (!names.insert(field.name).second) return invalid(StrCat("repeated field ", field.name));
    payload_size += field.value.size();
  }
  if (payload_size > kMaxBodyLength) return invalid("larger than 1 GiB");

  std::string body;
  body.push_back(0);  // flags, set below
  body.push_back(static_cast<char>(sample.fields.size()));
  AppendLittleEndian<uint16_t>(&body, static_cast<uint16_t>(sample.key.size()));
  body.append(sample.key);
  for (const Field& field : sample.fields) {
    body.push_back(static_cast<char>(field.name.size()));
    body.append(field.name);
    AppendLittleEndian<uint32_t>(&body, static_cast<uint32_t>(field.value.size()));
  }
  size_t payload_start = body.size();
  for (const Field& field : sample.fields) body.append(field.value.view());
  if (zstd_level > 0 && payload_size > 64) {
    std::string compressed(ZSTD_compressBound(payload_size), '\0');
    size_t n = ZSTD_compress(compressed.data(), compressed.size(), body.data() + payload_start,
                             payload_size, zstd_level);
    if (!ZSTD_isError(n) && n < payload_size) {
      body.resize(payload_start);
      body.append(compressed.data(), n);
      body[0] = static_cast<char>(kFlagZstd);
    }
  }
  if (body.size() > kMaxBodyLength) return invalid("larger than 1 GiB");
  AppendLittleEndian<uint32_t>(out, static_cast<uint32_t>(body.size()));
  AppendLittleEndian<uint32_t>(out, crc32c::Mask(crc32c::Value(body)));
  out->append(body);
  return static_cast<uint32_t>(kRecordPrefixSize + body.size());
}

absl::StatusOr<Sample> DecodeRecord(const Buffer& record, std::string_view url, uint64_t offset,
                                    std::string_view expected_key, RecordCrc crc) {
  auto error = [&](std::string_view what) { return RecordError(url, offset, expected_key, what); };
  Cursor prefix(record.view());
  uint64_t body_length, stored_crc;
  if (!prefix.U32(&body_length) || !prefix.U32(&stored_crc)) {
    return error("truncated record prefix");
  }
  if (body_length + kRecordPrefixSize != record.size()) {
    return error(StrCat("record length ", body_length + kRecordPrefixSize,
                        " disagrees with the index (", record.size(), " bytes)"));
  }
  std::string_view body = record.view().substr(kRecordPrefixSize);
  if (crc == RecordCrc::kCheck && crc32c::Mask(crc32c::Value(body)) != stored_crc) {
    return error("CRC32C mismatch");
  }

  Cursor c(body);
  uint64_t flags, field_count, key_length;
  std::string_view key;
  if (!c.U8(&flags) || !c.U8(&field_count) || !c.U16(&key_length) || !c.Take(key_length, &key)) {
    return error("truncated record header");
  }
  if ((flags & ~uint64_t{kFlagZstd}) != 0) return error("unknown record flags");
  if (key.empty()) return error("empty key");
  if (!expected_key.empty() && key != expected_key) {
    return error(StrCat("the record's key is '", key, "', the index says '", expected_key, "'"));
  }
  Sample sample;
  sample.key = std::string(key);
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  sample.fields.reserve(field_count);
  for (uint64_t i = 0; i < field_count; ++i) {
    uint64_t name_length, value_length;
    std::string_view name;
    if (!c.U8(&name_length) || !c.Take(name_length, &name) || !c.U32(&value_length)) {
      return error("truncated field table");
    }
    if (!ValidFieldName(name)) return error("invalid field name");
    sample.fields.push_back({std::string(name), Buffer()});
    sizes.push_back(value_length);
    total += value_length;
  }
  size_t payload_offset = kRecordPrefixSize + c.pos();
  Buffer payload;
  if (flags & kFlagZstd) {
    // The table's sizes bound the output, and a record is at most 1 GiB; check the frame's own
    // claim before allocating so that a corrupt table cannot ask for more.
    if (total > kMaxBodyLength) return error("field sizes exceed 1 GiB");
    std::string_view frame = body.substr(c.pos());
    unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
    if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != total) {
      return error("compressed payload size disagrees with the field table");
    }
    MutableBuffer out(total);
    size_t n = ZSTD_decompress(out.data(), total, frame.data(), frame.size());
    if (ZSTD_isError(n)) return error(StrCat("zstd: ", ZSTD_getErrorName(n)));
    if (n != total) return error("compressed payload size disagrees with the field table");
    payload = std::move(out).Finish();
    payload_offset = 0;
  } else {
    if (total != c.remaining()) {
      return error("field sizes disagree with the record length");
    }
    payload = record;
  }
  uint64_t at = payload_offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sample.fields[i].value = payload.Slice(at, sizes[i]);
    at += sizes[i];
  }
  return sample;
}

void AppendIndexEntry(uint64_t offset, uint32_t length, std::string_view key, std::string* out) {
  AppendLittleEndian<uint64_t>(out, offset);
  AppendLittleEndian<uint32_t>(out, length);
  AppendLittleEndian<uint16_t>(out, static_cast<uint16_t>(key.size()));
  out->append(key);
}

void AppendFooter(const Footer& footer, std::string_view index, std::string* out) {
  std::string f;
  AppendLittleEndian<uint64_t>(&f, footer.index_offset);
  AppendLittleEndian<uint64_t>(&f, footer.index_length);
  AppendLittleEndian<uint64_t>(&f, footer.record_count);
  AppendLittleEndian<uint32_t>(&f, kVersion);
  AppendLittleEndian<uint32_t>(&f, crc32c::Mask(crc32c::Value(index)));
  AppendLittleEndian<uint32_t>(&f, crc32c::Mask(crc32c::Value(f)));
  AppendLittleEndian<uint32_t>(&f, 0);
  f.append(kFooterMagic);
  out->append(f);
}

absl::StatusOr<Footer> ParseFooter(std::string_view bytes, uint64_t object_size,
                                   std::string_view url) {
  if (object_size < kHeaderSize + kFooterSize || bytes.size() != kFooterSize) {
    return ShardError(
        url, StrCat("truncated shard: ", object_size, " bytes is less than a header and a footer"));
  }
  if (bytes.substr(40, 8) != kFooterMagic) {
    return ShardError(url, StrCat("no shard footer at offset ", object_size - kFooterSize,
                                  " (truncated, still being written, or not a stoker shard)"));
  }
  uint64_t version = LoadLittleEndian(bytes.data() + 24, 4);
  if (version != kVersion) {
    return ShardError(url, StrCat("shard format version ", version,
                                  " is not supported (this stoker reads version ", kVersion, ")"));
  }
  uint32_t footer_crc = static_cast<uint32_t>(LoadLittleEndian(bytes.data() + 32, 4));
  if (crc32c::Mask(crc32c::Value(bytes.substr(0, 32))) != footer_crc) {
    return ShardError(url, StrCat("footer CRC32C mismatch at offset ", object_size - kFooterSize));
  }
  Footer footer;
  footer.index_offset = LoadLittleEndian(bytes.data(), 8);
  footer.index_length = LoadLittleEndian(bytes.data() + 8, 8);
  footer.record_count = LoadLittleEndian(bytes.data() + 16, 8);
  footer.index_crc = static_cast<uint32_t>(LoadLittleEndian(bytes.data() + 28, 4));
  if (footer.index_offset < kHeaderSize || footer.index_length > object_size ||
      footer.index_offset > object_size ||
      footer.index_offset + footer.index_length + kFooterSize != object_size) {
    return ShardError(url, StrCat("footer places the index at offset ", footer.index_offset,
                                  " length ", footer.index_length, ", which does not fit a ",
                                  object_size, "-byte shard (truncated or appended to?)"));
  }
  // Each index entry takes at least 15 bytes, which bounds record_count before anyone allocates.
  if (footer.record_count > footer.index_length / 15) {
    return ShardError(
        url, StrCat("footer claims ", footer.record_count, " records but the index has only ",
                    footer.index_length, " bytes"));
  }
  return footer;
}

absl::Status ParseIndex(
    std::string_view index, const Footer& footer, std::string_view url,
    absl::FunctionRef<void(uint64_t offset, uint32_t length, std::string_view key)> entry) {
  if (index.size() != footer.index_length) return ShardError(url, "index length mismatch");
  if (crc32c::Mask(crc32c::Value(index)) != footer.index_crc) {
    return ShardError(url, StrCat("index CRC32C mismatch (index at offset ", footer.index_offset,
                                  ", ", footer.index_length, " bytes)"));
  }
  Cursor c(index);
  uint64_t expected_offset = kHeaderSize;
  for (uint64_t i = 0; i < footer.record_count; ++i) {
    uint64_t offset, length, key_length;
    std::string_view key;
    if (!c.U64(&offset) || !c.U32(&length) || !c.U16(&key_length) || !c.Take(key_length, &key)) {
      return ShardError(url, StrCat("index entry ", i, " is truncated"));
    }
    if (offset != expected_offset || length < kRecordPrefixSize + 4 ||
        length > kRecordPrefixSize + kMaxBodyLength || key.empty()) {
      return ShardError(url, StrCat("index entry ", i, " (offset ", offset, ", length ", length,
                                    ") is not contiguous with the records before it"));
    }
    expected_offset = offset + length;
    entry(offset, static_cast<uint32_t>(length), key);
  }
  if (c.remaining() != 0) {
    return ShardError(url, StrCat("index has ", c.remaining(), " bytes after its ",
                                  footer.record_count, " entries"));
  }
  if (expected_offset != footer.index_offset) {
    return ShardError(url, StrCat("records end at offset ", expected_offset,
                                  " but the index starts at ", footer.index_offset));
  }
  return absl::OkStatus();
}

}  // namespace stoker::format::shard
