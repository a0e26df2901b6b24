// Fuzzes image decoding (image.h): arbitrary bytes as a JPEG or PNG, decoded whole to 1 and 3
// channels, at 1/2 scale, and as a region. Nothing may crash or hit undefined behaviour; a
// decoded image must have the size it claims; and when the whole image decodes, a region of it
// (a window drawn from the input's last bytes) must decode too, to the same pixels bit for bit
// (the fused random_resized_crop's promise: a region decode is the full decode, cropped).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

// The region [x, x + w) x [y, y + h) of `bytes` at 1/denom must equal `full` (that decode, whole).
void CheckRegionEqualsFull(const stoker::Buffer& bytes, const stoker::data::Tensor& full,
                           int channels, int denom, const uint8_t* pick) {
  const int fh = static_cast<int>(full.shape[0]), fw = static_cast<int>(full.shape[1]);
  const int w = 1 + pick[0] % fw, h = 1 + pick[1] % fh;
  const int x = pick[2] % (fw - w + 1), y = pick[3] % (fh - h + 1);
  auto region = stoker::data::DecodeJpegRegion(bytes, channels, denom, x, y, w, h);
  if (!region.ok()) {
    std::fprintf(stderr, "image_fuzzer: the whole image decodes but its region does not: %s\n",
                 std::string(region.status().message()).c_str());
    std::abort();
  }
  const auto& r = region->image;
  const int rw = static_cast<int>(r.shape[1]);
  if (region->y != y || region->x > x || r.shape[0] != h || region->x + rw < x + w ||
      r.shape[2] != channels) {
    std::fprintf(stderr, "image_fuzzer: region has the wrong place or size\n");
    std::abort();
  }
  for (int row = 0; row < h; ++row) {
    const uint8_t* got = r.values<uint8_t>() + (size_t(row) * rw + (x - region->x)) * channels;
    const uint8_t* want = full.values<uint8_t>() + (size_t(y + row) * fw + x) * channels;
    if (std::memcmp(got, want, size_t(w) * channels) != 0) {
      std::fprintf(stderr, "image_fuzzer: region row %d differs from the full decode\n", row);
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  stoker::Buffer bytes =
      stoker::Buffer::Copy(std::string_view(reinterpret_cast<const char*>(data), size));
  for (int channels : {1, 3}) Check(stoker::data::DecodeImage(bytes, channels), channels);
  auto half = stoker::data::DecodeImage(bytes, 3, 1, 2);
  Check(half, 3);
  auto region = stoker::data::DecodeJpegRegion(bytes, 3, 2, 3, 5, 17, 9);
  if (region.ok()) Check(region->image, 3);
  if (size >= 8 && data[0] == 0xFF && data[1] == 0xD8 && half.ok()) {
    uint8_t pick[4];
    std::memcpy(pick, data + size - 4, 4);
    CheckRegionEqualsFull(bytes, *half, 3, 2, pick);
    auto full = stoker::data::DecodeImage(bytes, 3);
    if (full.ok() && full->NumValues() <= (int64_t{1} << 22)) {
      CheckRegionEqualsFull(bytes, *full, 3, 1, pick);
    }
  }
  return 0;
}
