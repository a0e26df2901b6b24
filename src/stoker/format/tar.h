// WebDataset tar archives (docs/format.md, "WebDataset tar"): the pure pieces the streaming reader
// (sample_stream.h, StreamFormat::kTar) and the fuzzer use. POSIX ustar and GNU tar output (long
// names, pax path records) are understood.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace stoker::format::tar {

inline constexpr uint64_t kBlockSize = 512;
inline constexpr uint64_t kMaxMemberSize = uint64_t{1} << 30;

struct MemberHeader {
  std::string path;  // prefix + name for ustar; GNU/pax long names are applied by the reader
  std::string link;  // the link target of a hard link ('1') or symlink ('2'); GNU/pax long
                     // link names are applied by the reader
  uint64_t size = 0;
  char type = '0';  // '0' (or '\0') regular file, '1' hard link, '2' symlink, '5' directory,
                    // 'L'/'K' GNU long name/link name, 'x' pax, 'g' pax global, ...
  bool regular() const { return type == '0' || type == '\0' || type == '7'; }
  // Members that carry no sample data and are skipped: directories, pax global headers, GNU
  // dump directories and volume labels.
  bool ignorable() const { return type == '5' || type == 'g' || type == 'D' || type == 'V'; }
};

// True when `block` (512 bytes) is all zeros: the end-of-archive marker.
bool IsZeroBlock(std::string_view block);
// Parses one 512-byte header found at `offset` of `url`; DataLoss on a bad checksum or size field.
absl::StatusOr<MemberHeader> ParseHeader(std::string_view block, std::string_view url,
                                         uint64_t offset);
// Why `head`, the first bytes of an object of `size` bytes, does not start with a tar header, or ""
// when it does: a 512-byte block that is not all zeros and whose checksum field (octal) matches
// (content sniffing, sniff.h). An archive that starts with a zero block (an empty one) does not.
std::string NotATar(std::string_view head, uint64_t size);
// The value of `name` (e.g. "path", "linkpath") in a pax extended header's records
// ("<len> path=<value>\n" ...), or "" when there is none; DataLoss when the records are malformed.
absl::StatusOr<std::string> PaxValue(std::string_view records, std::string_view name);
inline absl::StatusOr<std::string> PaxPath(std::string_view records) {
  return PaxValue(records, "path");
}
// Rejects absolute paths and ".." components (InvalidArgument naming url and offset); returns the
// path without a leading "./".
absl::StatusOr<std::string> CleanPath(std::string_view path, std::string_view url, uint64_t offset);

struct KeyAndField {
  std::string key;    // the path up to the first '.' of the file name
  std::string field;  // the rest after that dot (empty when the name has none)
};
KeyAndField SplitKeyField(std::string_view path);

// Bytes of padding after a member of `size` bytes.
inline uint64_t Padding(uint64_t size) { return (kBlockSize - size % kBlockSize) % kBlockSize; }

}  // namespace stoker::format::tar
