// Fuzzes the snapshot record decoder (snapshot.h): the input is split at the first NUL into the
// "__tensors__" text and one field's bytes, named "x". Whatever decodes must be an element whose
// tensors hold exactly the bytes their dtype and shape say, and must encode to a meta text that
// decodes to the same element.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "stoker/data/snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  std::string_view meta = input.substr(0, nul);
  std::string_view bytes = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  std::vector<std::pair<std::string, Buffer>> fields;
  fields.emplace_back("x", Buffer::Copy(bytes));
  auto e = data::DecodeSnapshotElement(meta, fields, "fuzz");
  if (!e.ok()) return 0;
  for (const auto& [name, t] : e->fields) {
    if (t.dtype != data::DType::kBytes &&
        static_cast<uint64_t>(t.NumValues()) * data::DTypeSize(t.dtype) != t.data.size())
      std::abort();
  }
  auto again_meta = data::EncodeSnapshotMeta(*e);
  if (!again_meta.ok()) return 0;  // e.g. an element without a key: not writable, fine to read
  auto again = data::DecodeSnapshotElement(*again_meta, std::move(fields), "fuzz");
  if (!again.ok() || again->keys != e->keys || again->fields.size() != e->fields.size())
    std::abort();
  return 0;
}
