// Fuzzes image decoding (image.h): arbitrary bytes as a JPEG or PNG, decoded whole to 1 and 3
// channels, at 1/2 scale, and as a region. Nothing may crash or hit undefined behaviour; a
// decoded image must have the size it claims.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "stoker/data/image.h"

namespace {

void Check(const absl::StatusOr<stoker::data::Tensor>& t, int channels) {
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();  // errors always say what is wrong
    return;
  }
  if (t->shape.size() != 3 || t->shape[2] != channels ||
      t->data.size() != static_cast<size_t>(t->shape[0] * t->shape[1] * t->shape[2])) {
    std::fprintf(stderr, "image_fuzzer: decoded tensor has the wrong size\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  stoker::Buffer bytes =
      stoker::Buffer::Copy(std::string_view(reinterpret_cast<const char*>(data), size));
  for (int channels : {1, 3}) Check(stoker::data::DecodeImage(bytes, channels), channels);
  Check(stoker::data::DecodeImage(bytes, 3, 1, 2), 3);
  auto region = stoker::data::DecodeJpegRegion(bytes, 3, 2, 3, 5, 17, 9);
  if (region.ok()) Check(region->image, 3);
  return 0;
}
