// Fuzz target: arbitrary bytes as an element payload (element_codec.h), as a hostile peer could
// send them in GetElements replies. DecodeElement must return an element or a DataLoss error, never
// crash, hit undefined behaviour or allocate without bound. When it succeeds, the element must
// survive a round trip: encoding it again (plain, zstd and lz4) and decoding gives the same
// element. The same bytes cut into pieces (as a payload handed over in shared memory and mapped
// files arrives) must decode exactly as the one buffer does: the same element, or the same error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "stoker/service/common/element_codec.h"

namespace {

using stoker::service::Compression;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "element_codec_fuzzer: %s\n", what);
  std::abort();
}

bool SameBytes(const stoker::Buffer& a, const stoker::Buffer& b) {
  return a.size() == b.size() && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

bool SameElement(const stoker::data::Element& a, const stoker::data::Element& b) {
  if (a.keys != b.keys || a.sample_index != b.sample_index || a.epoch != b.epoch ||
      a.fields.size() != b.fields.size())
    return false;
  for (auto ia = a.fields.begin(), ib = b.fields.begin(); ia != a.fields.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.dtype != ib->second.dtype ||
        ia->second.shape != ib->second.shape || !SameBytes(ia->second.data, ib->second.data))
      return false;
  }
  return true;
}

// `bytes` cut into pieces whose lengths follow from the bytes themselves (empty pieces among
// them), so that fixed-size fields and tensor bytes straddle pieces in every way.
std::vector<stoker::Buffer> Cut(const stoker::Buffer& bytes) {
  std::vector<stoker::Buffer> pieces;
  size_t at = 0, step = bytes.size() > 0 ? bytes.data()[bytes.size() - 1] : 0;
  while (at < bytes.size()) {
    step = (step * 31 + 7) % 97;  // 0 .. 96: an empty piece now and then
    size_t n = std::min(step, bytes.size() - at);
    pieces.push_back(bytes.Slice(at, n));
    at += n;
  }
  return pieces;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const stoker::Buffer bytes =
      stoker::Buffer::Copy(std::string_view(reinterpret_cast<const char*>(data), size));
  auto decoded = stoker::service::DecodeElement(bytes);
  auto gathered = stoker::service::DecodeElement(Cut(bytes));
  if (decoded.ok() != gathered.ok() ||
      (!decoded.ok() && decoded.status().message() != gathered.status().message()) ||
      (decoded.ok() && !SameElement(*decoded, *gathered)))
    Fail("the payload cut into pieces decodes otherwise than in one buffer");
  if (!decoded.ok()) {
    if (decoded.status().code() != absl::StatusCode::kDataLoss ||
        decoded.status().message().empty())
      Fail("a malformed payload must be a DataLoss error with a message");
    return 0;
  }
  for (Compression c : {Compression::kNone, Compression::kZstd, Compression::kLz4}) {
    std::string wire = stoker::service::EncodeElement(*decoded, c);
    auto again = stoker::service::DecodeElement(std::move(wire));
    if (!again.ok()) Fail("a decoded element, encoded again, does not decode");
    if (!SameElement(*decoded, *again)) Fail("a decoded element changes in a round trip");
  }
  return 0;
}
