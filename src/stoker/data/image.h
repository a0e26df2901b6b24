// Image primitives for the pipeline's transforms: JPEG (TurboJPEG) and PNG (libpng) decoding to
// uint8 HWC tensors, optionally at a reduced JPEG DCT scale, and bilinear crop-resize.
//
// Thread safety: all functions are thread-safe (TurboJPEG handles are per thread).
#pragma once

#include <optional>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "stoker/core/buffer.h"
#include "stoker/data/tensor.h"

namespace stoker::data {

struct ImageSize {
  int width = 0;
  int height = 0;
};

// The size of a JPEG from its header; nullopt if `bytes` is not a JPEG.
std::optional<ImageSize> JpegSize(const Buffer& bytes);

// The largest reduction among 1/2, 1/4, 1/8 (the fast ones) such that the image scaled by it is
// still at least need_w x need_h (1/1 if none is).
std::pair<int, int> PickJpegScale(ImageSize full, int need_w, int need_h);

// Decodes a JPEG or PNG into uint8 [height, width, channels] (channels 1 or 3). JPEGs are decoded
// at scale num/denom (e.g. 1/2) when given. Conversions (docs/pipeline.md, "Image decoding"):
//  - damaged JPEG data (a truncated file, a bad Huffman code, ...) is an InvalidArgument error
//    "corrupt JPEG: ...", never grey or garbled rows; stray bytes between segments are accepted;
//  - CMYK and YCCK JPEGs become RGB as Pillow's convert("RGB") does;
//  - 16-bit PNGs are scaled to 8 bits as round(v / 257), with no gamma; alpha is dropped;
//  - grey from colour (JPEG and PNG alike) is Rec. 601 luma, (19595 R + 38470 G + 7471 B) / 65536
//    rounded, as libjpeg and Pillow's convert("L") compute it.
absl::StatusOr<Tensor> DecodeImage(const Buffer& bytes, int channels, int scale_num = 1,
                                   int scale_denom = 1);

// Decodes only the region [x, x + w) x [y, y + h) of a JPEG (coordinates in the image scaled by
// 1/scale_denom, scale_denom in {1, 2, 4, 8}; the region is clamped to the image): rows above are
// skipped without colour conversion, rows below are not decoded, and only the iMCU columns around
// the region are, with one iMCU of margin each side so that chroma upsampling sees the neighbours
// it sees in the full image. Returns rows y to y + h of those columns: the region and the margin
// (the image starts at column x or left of it, and may end right of x + w). Every pixel inside
// [x, x + w) equals the full decode's at the same scale, bit for bit; the outermost pixels of the
// margin may not. A progressive JPEG is decoded whole up to the region's last row (its entropy
// decode covers the whole image anyway, and libjpeg's block smoothing of incompletely refined
// coefficients reads neighbouring blocks). Damage in the rows read is an error as for
// DecodeImage; damage below the region is not read, so not seen.
struct DecodedRegion {
  Tensor image;  // uint8 [rows, columns, channels]
  int x = 0;     // column of image's first pixel in the scaled image (<= x asked)
  int y = 0;     // row of image's first pixel in the scaled image (y asked, clamped)
};
absl::StatusOr<DecodedRegion> DecodeJpegRegion(const Buffer& bytes, int channels, int scale_denom,
                                               int x, int y, int w, int h);

// Crops the rectangle (x, y, w, h) (in pixels, fractional allowed) out of a uint8 HWC image and
// resizes it to out_h x out_w with bilinear interpolation (pixel centers aligned).
Tensor CropResize(const Tensor& image, double x, double y, double w, double h, int out_h,
                  int out_w);
// CropResize of a part of a larger image: `part` holds the pixels of a full_w x full_h image from
// (origin_x, origin_y) on (a region decode), and (x, y, w, h) is in the larger image's coordinates.
// The result is bit for bit CropResize of the larger image, as long as `part` holds every pixel
// that reads: the rectangle and one pixel more on each side, where the larger image has them.
Tensor CropResizeWithin(const Tensor& part, int origin_x, int origin_y, int full_w, int full_h,
                        double x, double y, double w, double h, int out_h, int out_w);
// Exact integer crop (no interpolation).
Tensor Crop(const Tensor& image, int x, int y, int w, int h);

// A uint8 HWC image encoded as JPEG (tests and the benchmark data generator): 4:2:0 chroma (grey
// for 1 channel), baseline.
absl::StatusOr<Buffer> EncodeJpeg(const Tensor& image, int quality);
// The same with the chroma subsampling named ("444", "422", "420", "440", "411"; ignored for 1
// channel) and optionally progressive (tests of the decoder's paths).
absl::StatusOr<Buffer> EncodeJpeg(const Tensor& image, int quality, std::string_view subsampling,
                                  bool progressive);
// A uint8 HWC image (1 or 3 channels) encoded as PNG (tests).
absl::StatusOr<Buffer> EncodePng(const Tensor& image);

}  // namespace stoker::data
