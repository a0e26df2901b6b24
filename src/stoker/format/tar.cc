#include "stoker/format/tar.h"

#include <cstdio>

#include "stoker/core/strings.h"

namespace stoker::format::tar {
namespace {

std::string_view CString(std::string_view field) {
  size_t nul = field.find('\0');
  return nul == std::string_view::npos ? field : field.substr(0, nul);
}

// Octal (space/NUL padded), or GNU base-256 when the high bit of the first byte is set.
bool ParseNumber(std::string_view field, uint64_t* out) {
  if (!field.empty() && (static_cast<uint8_t>(field[0]) & 0x80)) {
    if (static_cast<uint8_t>(field[0]) != 0x80) return false;  // negative or too large
    uint64_t v = 0;
    for (size_t i = 1; i < field.size(); ++i) {
      if (v >> 56) return false;
      v = (v << 8) | static_cast<uint8_t>(field[i]);
    }
    *out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < field.size() && field[i] == ' ') ++i;
  bool any = false;
  for (; i < field.size() && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (field[i] - '0');
    any = true;
  }
  for (; i < field.size(); ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  *out = v;
  return any;
}

}  // namespace

bool IsZeroBlock(std::string_view block) {
  for (char c : block) {
    if (c != 0) return false;
  }
  return true;
}

namespace {

// The sum ustar's checksum field holds: every byte of the header, the field itself as spaces.
uint64_t HeaderSum(std::string_view block) {
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlockSize; ++i) {
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<uint8_t>(block[i]);
  }
  return sum;
}

}  // namespace

std::string NotATar(std::string_view head, uint64_t size) {
  if (size == 0) return "empty file";
  if (head.size() < kBlockSize) {
    return StrCat("only ", size, " bytes; a tar header takes ", kBlockSize);
  }
  std::string_view block = head.substr(0, kBlockSize);
  if (IsZeroBlock(block)) {
    return "the first 512 bytes are zeros (an empty archive, which holds no samples, or not a tar)";
  }
  uint64_t stored;
  if (!ParseNumber(block.substr(148, 8), &stored)) {
    return "the header checksum field at offset 148 is not an octal number";
  }
  uint64_t sum = HeaderSum(block);
  if (sum != stored) {
    char text[128];
    std::snprintf(text, sizeof(text),
                  "the header checksum at offset 148 is 0%llo (octal); the header at offset 0 sums "
                  "to 0%llo",
                  static_cast<unsigned long long>(stored), static_cast<unsigned long long>(sum));
    return text;
  }
  return "";
}

absl::StatusOr<MemberHeader> ParseHeader(std::string_view block, std::string_view url,
                                         uint64_t offset) {
  auto error = [&](std::string_view what) {
    return absl::DataLossError(StrCat(url, ": tar header at offset ", offset, ": ", what));
  };
  if (block.size() != kBlockSize) return error("truncated");
  uint64_t stored;
  if (!ParseNumber(block.substr(148, 8), &stored))
    return error("bad checksum field (not a tar file?)");
  uint64_t sum = HeaderSum(block);
  if (sum != stored) return error("checksum mismatch (corrupt, or not a tar file)");
  MemberHeader header;
  if (!ParseNumber(block.substr(124, 12), &header.size)) return error("bad size field");
  header.type = block[156];
  header.link = std::string(CString(block.substr(157, 100)));
  std::string_view name = CString(block.substr(0, 100));
  std::string_view magic = block.substr(257, 6);
  std::string_view prefix = CString(block.substr(345, 155));
  if (magic == std::string_view("ustar\0", 6) && !prefix.empty()) {
    header.path = StrCat(prefix, "/", name);
  } else {
    header.path = std::string(name);
  }
  return header;
}

absl::StatusOr<std::string> PaxValue(std::string_view records, std::string_view name) {
  std::string path;
  while (!records.empty()) {
    size_t space = records.find(' ');
    if (space == std::string_view::npos || space == 0 || space > 20) {
      return absl::DataLossError("malformed pax record");
    }
    uint64_t length = 0;
    for (size_t i = 0; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9') return absl::DataLossError("malformed pax record");
      length = length * 10 + (records[i] - '0');
    }
    if (length <= space + 1 || length > records.size() || records[length - 1] != '\n') {
      return absl::DataLossError("malformed pax record length");
    }
    std::string_view record = records.substr(space + 1, length - space - 2);
    size_t eq = record.find('=');
    if (eq == std::string_view::npos) return absl::DataLossError("pax record without '='");
    if (record.substr(0, eq) == name) path = std::string(record.substr(eq + 1));
    records.remove_prefix(length);
  }
  return path;
}

absl::StatusOr<std::string> CleanPath(std::string_view path, std::string_view url,
                                      uint64_t offset) {
  auto reject = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat(url, ": tar member at offset ", offset, " (", path, ") rejected: ", why));
  };
  if (path.starts_with("/")) return reject("absolute path");
  while (path.starts_with("./")) path.remove_prefix(2);
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string_view part = path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part == "..") return reject("'..' in path");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (path.empty()) return reject("empty path");
  return std::string(path);
}

KeyAndField SplitKeyField(std::string_view path) {
  size_t slash = path.rfind('/');
  size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = path.find('.', base);
  if (dot == std::string_view::npos) return {std::string(path), ""};
  return {std::string(path.substr(0, dot)), std::string(path.substr(dot + 1))};
}

}  // namespace stoker::format::tar
