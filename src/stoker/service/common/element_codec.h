// Elements on the wire: a small header (keys, field names, dtypes, shapes) followed by the raw
// tensor bytes, each aligned to 8 bytes. No protobuf message per tensor: the payload of one element
// is one `bytes` field, and decoding slices the received bytes without copying them.
//
// Layout (little-endian): "STKE" u32 version; u64 sample_index; i64 epoch; u32 #keys, then per key
// u32 length + bytes; u32 #fields, then per field u32 name length + name, u8 dtype, u32 rank,
// rank × i64 dims, u64 data length, zero padding to a multiple of 8, the data.
//
// A job may compress its payloads (zstd or lz4): the whole encoding above is then wrapped as
// "STKZ" u8 algorithm (1 zstd, 2 lz4), 3 zero bytes, u64 encoded length, the compressed bytes.
// DecodeElement recognises both forms.
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/core/buffer.h"
#include "stoker/data/tensor.h"
#include "stoker/service/consumer.h"

namespace stoker::service {

enum class Compression : uint8_t { kNone = 0, kZstd = 1, kLz4 = 2 };

// A job's compression is a service mode: ParseMode<Compression> reads "none", "zstd" or "lz4",
// ModeName writes it (common/modes.cc).
std::string_view ModeName(Compression c);

// The largest element DecodeElement accepts once decompressed (a bound on what a hostile payload
// can make it allocate).
inline constexpr uint64_t kMaxElementBytes = uint64_t{1} << 30;

// An encoding as consecutive pieces, for sending without a copy: the small header parts are new
// buffers, tensor bytes are the element's own buffers (shared, not copied). Concatenated, the
// pieces are the encoding.
struct EncodedElement {
  std::vector<Buffer> pieces;
  size_t size = 0;  // sum of the pieces' sizes
};

// The encoding of `element`; compressed (one piece) unless `compression` is kNone.
EncodedElement EncodeElementPieces(const data::Element& element, Compression compression);
// Appends the (uncompressed) encoding of `element` to *out.
void EncodeElement(const data::Element& element, std::string* out);
// The encoding in one string (copied together from the pieces).
std::string EncodeElement(const data::Element& element, Compression compression);

// Decodes an element, compressed or not; its tensors share the payload's storage (no copy of
// uncompressed bytes). A malformed payload is a DataLoss error that says what and at which byte.
absl::StatusOr<data::Element> DecodeElement(Buffer bytes);
// The same for an encoding in consecutive pieces (a payload handed over as parts of shared memory
// and of mapped files): tensor bytes that lie in one piece are slices of it, bytes that span
// pieces are copied together; errors count bytes from the first piece's start.
absl::StatusOr<data::Element> DecodeElement(const std::vector<Buffer>& pieces);
inline absl::StatusOr<data::Element> DecodeElement(std::string bytes) {
  return DecodeElement(Buffer::FromString(std::move(bytes)));
}

}  // namespace stoker::service
