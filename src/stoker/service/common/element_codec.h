// Elements on the wire: a small header (keys, field names, dtypes, shapes) followed by the raw
// tensor bytes, each aligned to 8 bytes. No protobuf message per tensor: the payload of one element
// is one `bytes` field, and decoding slices the received bytes without copying them.
//
// Layout (little-endian): "STKE" u32 version; u64 sample_index; i64 epoch; u32 #keys, then per key
// u32 length + bytes; u32 #fields, then per field u32 name length + name, u8 dtype, u32 rank,
// rank × i64 dims, u64 data length, zero padding to a multiple of 8, the data.
//
// Thread safety: free functions without shared state.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "stoker/data/tensor.h"

namespace stoker::service {

// Appends the encoding of `element` to *out.
void EncodeElement(const data::Element& element, std::string* out);

// Decodes an element; its tensors share `bytes` (no copy). A malformed payload is an error.
absl::StatusOr<data::Element> DecodeElement(std::string bytes);

}  // namespace stoker::service
