#include "stoker/data/image.h"

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>  // jpeglib.h needs FILE
#include <turbojpeg.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "stoker/core/strings.h"

namespace stoker::data {
namespace {

// One decompressor per thread: creating one costs more than decoding a small image.
tjhandle Decompressor() {
  thread_local struct Holder {
    tjhandle h = tjInitDecompress();
    ~Holder() { tjDestroy(h); }
  } holder;
  return holder.h;
}

bool IsPng(const Buffer& b) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), kSig, 8) == 0;
}

absl::StatusOr<Tensor> DecodePng(const Buffer& bytes, int channels) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    return absl::InvalidArgumentError(StrCat("cannot decode PNG: ", image.message));
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  if (image.width == 0 || image.height == 0 || image.width > 65535 || image.height > 65535) {
    png_image_free(&image);
    return absl::InvalidArgumentError("PNG has an unsupported size");
  }
  MutableBuffer out(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.data(), 0, nullptr)) {
    std::string message = image.message;
    png_image_free(&image);
    return absl::InvalidArgumentError(StrCat("cannot decode PNG: ", message));
  }
  Tensor t{DType::kUint8, {image.height, image.width, channels}, std::move(out).Finish()};
  return t;
}

}  // namespace

std::optional<ImageSize> JpegSize(const Buffer& bytes) {
  if (bytes.size() < 3 || bytes.data()[0] != 0xFF || bytes.data()[1] != 0xD8) return std::nullopt;
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(Decompressor(), bytes.data(), bytes.size(), &w, &h, &subsamp,
                          &colorspace) != 0) {
    return std::nullopt;
  }
  return ImageSize{w, h};
}

std::pair<int, int> PickJpegScale(ImageSize full, int need_w, int need_h) {
  // Only 1/2, 1/4 and 1/8: libjpeg-turbo has SIMD reduced IDCTs for these, while 3/4, 5/8, 7/8
  // use generic scaled IDCTs that cost more than a full decode (measured with decode_bench).
  std::pair<int, int> best{1, 1};
  for (int denom : {2, 4, 8}) {
    tjscalingfactor f{1, denom};
    if (TJSCALED(full.width, f) >= need_w && TJSCALED(full.height, f) >= need_h) best = {1, denom};
  }
  return best;
}

absl::StatusOr<Tensor> DecodeImage(const Buffer& bytes, int channels, int scale_num,
                                   int scale_denom) {
  if (IsPng(bytes)) return DecodePng(bytes, channels);
  tjhandle tj = Decompressor();
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (bytes.size() < 3 || bytes.data()[0] != 0xFF || bytes.data()[1] != 0xD8 ||
      tjDecompressHeader3(tj, bytes.data(), bytes.size(), &w, &h, &subsamp, &colorspace) != 0) {
    return absl::InvalidArgumentError(StrCat("not a JPEG or PNG image (", bytes.size(), " bytes)"));
  }
  tjscalingfactor sf{scale_num, scale_denom};
  int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
  if (sw <= 0 || sh <= 0 || static_cast<int64_t>(sw) * sh > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError(StrCat("JPEG has an unsupported size ", w, "x", h));
  }
  UninitBuffer out(static_cast<size_t>(sw) * sh * channels);
  int format = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  if (tjDecompress2(tj, bytes.data(), bytes.size(), out.data(), sw, 0, sh, format, 0) != 0 &&
      tjGetErrorCode(tj) == TJERR_FATAL) {
    return absl::InvalidArgumentError(StrCat("cannot decode JPEG: ", tjGetErrorStr2(tj)));
  }
  return Tensor{DType::kUint8, {sh, sw, channels}, std::move(out).Finish()};
}

namespace {

struct JpegErrors {
  jpeg_error_mgr manager;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnJpegError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  longjmp(errors->jump, 1);
}

void OnJpegMessage(j_common_ptr, int) {}  // warnings (e.g. premature end) are not errors here

// The part of DecodeJpegRegion that may longjmp out (through OnJpegError); it keeps no state of
// its own, so nothing is lost when it does.
struct RegionRead {
  int x = 0, y = 0, w = 0, h = 0;
  int rows = 0;
};
void ReadJpegRegion(jpeg_decompress_struct* cinfo, const Buffer& bytes, int channels,
                    int scale_denom, RegionRead* region, UninitBuffer* pixels) {
  jpeg_mem_src(cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  cinfo->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(scale_denom);
  cinfo->dct_method = JDCT_ISLOW;
  jpeg_start_decompress(cinfo);
  const int full_w = static_cast<int>(cinfo->output_width);
  const int full_h = static_cast<int>(cinfo->output_height);
  region->x = std::clamp(region->x, 0, full_w - 1);
  region->y = std::clamp(region->y, 0, full_h - 1);
  region->w = std::clamp(region->w, 1, full_w - region->x);
  region->h = std::clamp(region->h, 1, full_h - region->y);
  JDIMENSION x_offset = static_cast<JDIMENSION>(region->x);
  JDIMENSION width = static_cast<JDIMENSION>(region->w);
  if (region->x > 0 || region->w < full_w) jpeg_crop_scanline(cinfo, &x_offset, &width);
  region->x = static_cast<int>(x_offset);
  region->w = static_cast<int>(width);
  if (region->y > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(region->y));
  const size_t row_bytes = static_cast<size_t>(cinfo->output_width) * cinfo->output_components;
  *pixels = UninitBuffer(row_bytes * region->h);
  while (region->rows < region->h) {
    JSAMPROW row = pixels->data() + row_bytes * region->rows;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) break;
    ++region->rows;
  }
}

// Holds the setjmp; everything it touches after setjmp lives in memory (no clobbering).
absl::StatusOr<DecodedRegion> DecodeJpegRegionImpl(const Buffer& bytes, int channels,
                                                   int scale_denom, RegionRead& region) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  UninitBuffer pixels;
  cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = OnJpegError;
  errors.manager.emit_message = OnJpegMessage;
  errors.message[0] = '\0';
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(StrCat("cannot decode JPEG: ", errors.message));
  }
  jpeg_create_decompress(&cinfo);
  ReadJpegRegion(&cinfo, bytes, channels, scale_denom, &region, &pixels);
  jpeg_abort_decompress(&cinfo);  // the rows below the region are not needed
  jpeg_destroy_decompress(&cinfo);
  if (region.rows < region.h) return absl::InvalidArgumentError("cannot decode JPEG: truncated");
  DecodedRegion out;
  out.image = Tensor{DType::kUint8, {region.h, region.w, channels}, std::move(pixels).Finish()};
  out.x = region.x;
  out.y = region.y;
  return out;
}

}  // namespace

absl::StatusOr<DecodedRegion> DecodeJpegRegion(const Buffer& bytes, int channels, int scale_denom,
                                               int x, int y, int w, int h) {
  RegionRead region{x, y, w, h, 0};
  return DecodeJpegRegionImpl(bytes, channels, scale_denom, region);
}

Tensor CropResize(const Tensor& image, double x, double y, double w, double h, int out_h,
                  int out_w) {
  const int ih = static_cast<int>(image.shape[0]), iw = static_cast<int>(image.shape[1]);
  const int c = static_cast<int>(image.shape[2]);
  const uint8_t* src = image.values<uint8_t>();
  UninitBuffer out(static_cast<size_t>(out_h) * out_w * c);
  uint8_t* dst = out.data();
  const double sx = w / out_w, sy = h / out_h;
  // Fixed point: weights in [0, 256], products fit in int32 (255 * 256 * 256).
  constexpr int kOne = 256;
  std::vector<int> x0s(out_w), x1s(out_w), wxs(out_w);
  for (int ox = 0; ox < out_w; ++ox) {
    double fx = std::clamp(x + (ox + 0.5) * sx - 0.5, 0.0, static_cast<double>(iw - 1));
    int x0 = static_cast<int>(fx);
    x0s[ox] = x0 * c;
    x1s[ox] = std::min(x0 + 1, iw - 1) * c;
    wxs[ox] = static_cast<int>(std::lround((fx - x0) * kOne));
  }
  for (int oy = 0; oy < out_h; ++oy) {
    double fy = std::clamp(y + (oy + 0.5) * sy - 0.5, 0.0, static_cast<double>(ih - 1));
    int y0 = static_cast<int>(fy);
    int y1 = std::min(y0 + 1, ih - 1);
    const int wy = static_cast<int>(std::lround((fy - y0) * kOne));
    const uint8_t* row0 = src + static_cast<size_t>(y0) * iw * c;
    const uint8_t* row1 = src + static_cast<size_t>(y1) * iw * c;
    uint8_t* o = dst + static_cast<size_t>(oy) * out_w * c;
    for (int ox = 0; ox < out_w; ++ox) {
      const int wx = wxs[ox];
      const uint8_t* a = row0 + x0s[ox];
      const uint8_t* b = row0 + x1s[ox];
      const uint8_t* d = row1 + x0s[ox];
      const uint8_t* e = row1 + x1s[ox];
      for (int k = 0; k < c; ++k) {
        int top = a[k] * kOne + (b[k] - a[k]) * wx;
        int bottom = d[k] * kOne + (e[k] - d[k]) * wx;
        int v = top * kOne + (bottom - top) * wy;
        o[ox * c + k] = static_cast<uint8_t>((v + kOne * kOne / 2) >> 16);
      }
    }
  }
  return Tensor{DType::kUint8, {out_h, out_w, c}, std::move(out).Finish()};
}

Tensor Crop(const Tensor& image, int x, int y, int w, int h) {
  const int iw = static_cast<int>(image.shape[1]), c = static_cast<int>(image.shape[2]);
  UninitBuffer out(static_cast<size_t>(w) * h * c);
  for (int r = 0; r < h; ++r) {
    std::memcpy(out.data() + static_cast<size_t>(r) * w * c,
                image.values<uint8_t>() + (static_cast<size_t>(y + r) * iw + x) * c,
                static_cast<size_t>(w) * c);
  }
  return Tensor{DType::kUint8, {h, w, c}, std::move(out).Finish()};
}

absl::StatusOr<Buffer> EncodeJpeg(const Tensor& image, int quality) {
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  int c = static_cast<int>(image.shape[2]);
  int rc = tjCompress2(tj, image.values<uint8_t>(), static_cast<int>(image.shape[1]), 0,
                       static_cast<int>(image.shape[0]), c == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg,
                       &size, c == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  if (rc != 0) {
    std::string message = tjGetErrorStr2(tj);
    tjDestroy(tj);
    return absl::InternalError(StrCat("cannot encode JPEG: ", message));
  }
  Buffer out = Buffer::Copy(std::string_view(reinterpret_cast<char*>(jpeg), size));
  tjFree(jpeg);
  tjDestroy(tj);
  return out;
}

absl::StatusOr<Buffer> EncodePng(const Tensor& image) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.shape[1]);
  png.height = static_cast<png_uint_32>(image.shape[0]);
  png.format = image.shape[2] == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.values<uint8_t>(), 0, nullptr)) {
    return absl::InternalError(StrCat("cannot encode PNG: ", png.message));
  }
  MutableBuffer out(size);
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.values<uint8_t>(), 0, nullptr)) {
    return absl::InternalError(StrCat("cannot encode PNG: ", png.message));
  }
  out.Truncate(size);
  return std::move(out).Finish();
}

}  // namespace stoker::data
