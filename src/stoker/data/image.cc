#include "stoker/data/image.h"

#include <jpeglib.h>
// (after jpeglib.h) the message codes of libjpeg warnings
#include <jerror.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>  // jpeglib.h needs FILE
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "stoker/core/status.h"
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

bool IsJpeg(const Buffer& b) { return b.size() >= 3 && b.data()[0] == 0xFF && b.data()[1] == 0xD8; }

constexpr int64_t kMaxPixels = int64_t{1} << 28;

// Rec. 601 luma in 16-bit fixed point, rounded: what libjpeg does for RGB -> grayscale and what
// Pillow's convert("L") does.
inline uint8_t Luma(int r, int g, int b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
}

// (a * b) / 255 rounded, as Pillow's MULDIV255.
inline int MulDiv255(int a, int b) {
  int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// One row of CMYK (as Pillow reads it: ink amounts, 0 = no ink) to RGB or grey; Pillow's formula:
// R = (255 - C) * (255 - K) / 255. Adobe's CMYK JPEGs store inverted values (`inverted`).
void CmykRow(const uint8_t* in, int width, bool inverted, int channels, uint8_t* out) {
  for (int x = 0; x < width; ++x, in += 4) {
    int c = in[0], m = in[1], y = in[2], k = in[3];
    if (inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
    const int nk = 255 - k;
    const int r = std::clamp(nk - MulDiv255(c, nk), 0, 255);
    const int g = std::clamp(nk - MulDiv255(m, nk), 0, 255);
    const int b = std::clamp(nk - MulDiv255(y, nk), 0, 255);
    if (channels == 1) {
      *out++ = Luma(r, g, b);
    } else {
      *out++ = static_cast<uint8_t>(r);
      *out++ = static_cast<uint8_t>(g);
      *out++ = static_cast<uint8_t>(b);
    }
  }
}

// ---- PNG (libpng's low-level API: no gamma handling, so values are not brightened) ----

struct PngInput {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void ReadPngBytes(png_structp png, png_bytep out, size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > in->size - in->pos) png_error(png, "truncated PNG (the data ends inside a chunk)");
  std::memcpy(out, in->data + in->pos, n);
  in->pos += n;
}

void OnPngError(png_structp png, png_const_charp message) {
  auto* text = static_cast<std::string*>(png_get_error_ptr(png));
  *text = message;
  png_longjmp(png, 1);
}
void OnPngWarning(png_structp, png_const_charp) {}  // ancillary-chunk problems do not touch pixels

// The part of DecodePng that may longjmp out. It must own no object with a destructor: a longjmp
// skips destructors, so everything it allocates is owned by the caller (`pixels`, `rgb`, `rows`)
// or by libpng's structs, which the caller frees. Never inlined: the caller's objects it fills
// must stay in memory, not in registers that the longjmp restores to their values at setjmp
// (inlined, GCC kept `pixels` in registers and freed a stale pointer after a truncated PNG).
[[gnu::noinline]] void ReadPng(png_structp png, png_infop info, int channels, UninitBuffer* pixels,
                               std::vector<uint8_t>* rgb, std::vector<png_bytep>* rows, int* width,
                               int* height) {
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || w > 65535 || h > 65535 || int64_t{w} * h > kMaxPixels) {
    png_error(png, "PNG has an unsupported size");
  }
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);                      // round(v / 257)
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);  // as Pillow's convert("RGB")
  const bool source_grey = (color & PNG_COLOR_MASK_COLOR) == 0;
  if (source_grey && channels == 3) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int got = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if ((got != 1 && got != 3) || row_bytes != size_t{w} * got)
    png_error(png, "unexpected PNG layout");
  *width = static_cast<int>(w);
  *height = static_cast<int>(h);
  *pixels = UninitBuffer(size_t{w} * h * channels);
  // RGB read for a grey output: convert with Rec. 601 weights afterwards, as for JPEG.
  uint8_t* target = pixels->data();
  if (got != channels) {
    rgb->resize(row_bytes * h);
    target = rgb->data();
  }
  rows->resize(h);
  for (png_uint_32 y = 0; y < h; ++y) (*rows)[y] = target + row_bytes * y;
  png_read_image(png, rows->data());
}

absl::StatusOr<Tensor> DecodePng(const Buffer& bytes, int channels) {
  std::string message;
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &message, OnPngError, OnPngWarning);
  if (png == nullptr) return absl::InternalError("cannot create a PNG decoder");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::InternalError("cannot create a PNG decoder");
  }
  PngInput input{bytes.data(), bytes.size(), 0};
  png_set_read_fn(png, &input, ReadPngBytes);
  UninitBuffer pixels;
  std::vector<uint8_t> rgb;
  std::vector<png_bytep> rows;
  int width = 0, height = 0;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::InvalidArgumentError(StrCat("cannot decode PNG: ", message));
  }
  ReadPng(png, info, channels, &pixels, &rgb, &rows, &width, &height);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!rgb.empty()) {
    const uint8_t* in = rgb.data();
    uint8_t* out = pixels.data();
    for (size_t i = 0, n = size_t{static_cast<size_t>(width)} * height; i < n; ++i, in += 3) {
      out[i] = Luma(in[0], in[1], in[2]);
    }
  }
  return Tensor{DType::kUint8, {height, width, channels}, std::move(pixels).Finish()};
}

// ---- JPEG (libjpeg-turbo's libjpeg API; warnings are checked) ----

struct JpegErrors {
  jpeg_error_mgr manager;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool corrupt = false;  // stopped on a warning (damaged data), not on an error
};

void OnJpegError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  longjmp(errors->jump, 1);
}

// libjpeg reports damaged data (a truncated file, a bad Huffman code, a missing restart marker) as
// warnings and goes on with grey or garbled pixels. Those are errors here. Only warnings about
// metadata or stray bytes between segments, with every pixel intact, are let through.
void OnJpegMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  switch (cinfo->err->msg_code) {
    case JWRN_EXTRANEOUS_DATA:  // junk between markers (common in the wild; pixels intact)
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_BOGUS_ICC:
      return;
    default:
      break;
  }
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  errors->corrupt = true;
  longjmp(errors->jump, 1);
}

// The part of the JPEG decode that may longjmp out (through OnJpegError/OnJpegMessage); it keeps
// no state of its own, so nothing is lost when it does. With `full`, the whole image is decoded.
//
// A region is decoded so that its pixels equal the full decode's at that place, bit for bit.
// libjpeg-turbo decodes whole iMCU columns (jpeg_crop_scanline moves the left edge down to one)
// and upsamples chroma within the columns it decodes, so at the edges of those columns the
// smoothing filter sees an edge that the full image does not have: the outermost pixels can
// differ. The columns are therefore widened by one iMCU on each side (where the image goes on);
// the margin is returned with the region (trimming it would cost a copy of every row) and only
// [x, x + w) is guaranteed. Rows need no margin: jpeg_skip_scanlines keeps the upsampler's context
// rows, and the rows after the region's last are decoded as context.
struct RegionRead {
  int x = 0, y = 0, w = 0, h = 0;
  bool full = false;
  int rows = 0;
};
void ReadJpeg(jpeg_decompress_struct* cinfo, const Buffer& bytes, int channels, int scale_num,
              int scale_denom, RegionRead* region, UninitBuffer* pixels,
              std::vector<uint8_t>* cmyk_row) {
  jpeg_mem_src(cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  cinfo->scale_num = static_cast<unsigned int>(scale_num);
  cinfo->scale_denom = static_cast<unsigned int>(scale_denom);
  cinfo->dct_method = JDCT_ISLOW;
  jpeg_calc_output_dimensions(cinfo);
  if (int64_t{cinfo->output_width} * cinfo->output_height > kMaxPixels) {
    std::snprintf(reinterpret_cast<JpegErrors*>(cinfo->err)->message, JMSG_LENGTH_MAX,
                  "unsupported size %ux%u", cinfo->image_width, cinfo->image_height);
    longjmp(reinterpret_cast<JpegErrors*>(cinfo->err)->jump, 1);
  }
  jpeg_start_decompress(cinfo);
  const int full_w = static_cast<int>(cinfo->output_width);
  const int full_h = static_cast<int>(cinfo->output_height);
  if (region->full) {
    region->x = 0, region->y = 0, region->w = full_w, region->h = full_h;
  }
  region->x = std::clamp(region->x, 0, full_w - 1);
  region->y = std::clamp(region->y, 0, full_h - 1);
  region->w = std::clamp(region->w, 1, full_w - region->x);
  region->h = std::clamp(region->h, 1, full_h - region->y);
  // A progressive JPEG is decoded whole, rows above the region read and dropped: its entropy
  // decode is done for the whole image by jpeg_start_decompress anyway, and when its scans leave
  // coefficients unrefined, libjpeg smooths each block with its neighbours' DC values, which a
  // cropped or skipped decode does not reproduce (image_fuzzer found one).
  const bool whole = cinfo->progressive_mode;
  // The columns decoded: the region widened by one iMCU each side, then to whole iMCUs.
  int decoded_x = 0, decoded_w = full_w;
  if (!whole && (region->x > 0 || region->w < full_w)) {
    const int imcu = cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size;
    const int left = std::max(0, region->x - imcu);
    const int right = std::min(full_w, region->x + region->w + imcu);
    JDIMENSION x_offset = static_cast<JDIMENSION>(left);
    JDIMENSION width = static_cast<JDIMENSION>(right - left);
    if (left > 0 || right < full_w) jpeg_crop_scanline(cinfo, &x_offset, &width);
    decoded_x = static_cast<int>(x_offset);
    decoded_w = static_cast<int>(width);
  }
  if (region->y > 0 && !whole) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(region->y));
  if (region->y > 0 && whole) {
    cmyk_row->resize(static_cast<size_t>(full_w) * 4);  // room for any output row
    for (int r = 0; r < region->y; ++r) {
      JSAMPROW row = cmyk_row->data();
      if (jpeg_read_scanlines(cinfo, &row, 1) != 1) break;  // the loop below sees the end
    }
  }
  region->x = decoded_x;
  region->w = decoded_w;
  const size_t row_bytes = static_cast<size_t>(decoded_w) * channels;
  *pixels = UninitBuffer(row_bytes * region->h);
  if (cmyk) cmyk_row->resize(static_cast<size_t>(decoded_w) * 4);
  while (region->rows < region->h) {
    uint8_t* dst = pixels->data() + row_bytes * region->rows;
    JSAMPROW row = cmyk ? cmyk_row->data() : dst;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) break;
    if (cmyk) CmykRow(cmyk_row->data(), decoded_w, cinfo->saw_Adobe_marker, channels, dst);
    ++region->rows;
  }
}

// Holds the setjmp; everything it touches after setjmp lives in memory (no clobbering).
absl::StatusOr<DecodedRegion> DecodeJpegImpl(const Buffer& bytes, int channels, int scale_num,
                                             int scale_denom, RegionRead& region) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  UninitBuffer pixels;
  std::vector<uint8_t> cmyk_row;
  cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = OnJpegError;
  errors.manager.emit_message = OnJpegMessage;
  errors.message[0] = '\0';
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(
        StrCat(errors.corrupt ? "corrupt JPEG: " : "cannot decode JPEG: ", errors.message, " (",
               bytes.size(), " bytes)"));
  }
  jpeg_create_decompress(&cinfo);
  ReadJpeg(&cinfo, bytes, channels, scale_num, scale_denom, &region, &pixels, &cmyk_row);
  jpeg_abort_decompress(&cinfo);  // the rows below the region are not needed
  jpeg_destroy_decompress(&cinfo);
  if (region.rows < region.h) {
    return absl::InvalidArgumentError(
        StrCat("corrupt JPEG: truncated (", region.rows, " of ", region.h, " rows)"));
  }
  DecodedRegion out;
  out.image = Tensor{DType::kUint8, {region.h, region.w, channels}, std::move(pixels).Finish()};
  out.x = region.x;
  out.y = region.y;
  return out;
}

}  // namespace

std::optional<ImageSize> JpegSize(const Buffer& bytes) {
  if (!IsJpeg(bytes)) return std::nullopt;
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
  if (!IsJpeg(bytes)) {
    return absl::InvalidArgumentError(StrCat("not a JPEG or PNG image (", bytes.size(), " bytes)"));
  }
  if (scale_num < 1 || scale_denom < 1 || scale_num > 16 || scale_denom > 16) {
    return absl::InvalidArgumentError(
        StrCat("unsupported JPEG scale ", scale_num, "/", scale_denom));
  }
  RegionRead region;
  region.full = true;
  ASSIGN_OR_RETURN(DecodedRegion decoded,
                   DecodeJpegImpl(bytes, channels, scale_num, scale_denom, region));
  return std::move(decoded.image);
}

absl::StatusOr<DecodedRegion> DecodeJpegRegion(const Buffer& bytes, int channels, int scale_denom,
                                               int x, int y, int w, int h) {
  RegionRead region{x, y, w, h, false, 0};
  return DecodeJpegImpl(bytes, channels, 1, scale_denom, region);
}

namespace {

// One source row resized horizontally: out[i] = a * (256 - wx) + b * wx for the two source values
// of output value i (at most 255 * 256, so uint16). Equal to a * 256 + (b - a) * wx.
// For 3 channels, the first `simd_count` output pixels (those whose two source pixels are
// neighbours and can be read as 8 bytes within the row) go through SSE2: the 6 bytes of a and b
// widened to 16 bits, times (wa, wa, wa, wb, wb, wb) in one multiply (each product and the sum fit
// 16 bits, so the low half is exact), the b half added onto the a half, 4 values stored of which
// the 4th is overwritten by the next pixel (so `out` has one value of room at its end).
struct HorizontalPlan {
  std::vector<int> x0s, x1s, wxs;  // byte offsets of a and b in the row, and wx, per output pixel
  std::vector<int16_t> weights;    // (wa, wa, wa, wb, wb, wb, 0, 0) per output pixel, 3 channels
  int simd_count = 0;
};

void ResizeRowH(const uint8_t* row, const HorizontalPlan& plan, int out_w, int c, uint16_t* out) {
  int ox = 0;
#ifdef __SSE2__
  if (c == 3) {
    const __m128i zero = _mm_setzero_si128();
    for (; ox < plan.simd_count; ++ox) {
      const __m128i pixels = _mm_unpacklo_epi8(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + plan.x0s[ox])), zero);
      const __m128i weights =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(plan.weights.data() + 8 * ox));
      const __m128i products = _mm_mullo_epi16(pixels, weights);
      const __m128i sums = _mm_add_epi16(products, _mm_srli_si128(products, 6));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 3 * ox), sums);
    }
  }
#endif
  for (; ox < out_w; ++ox) {
    const uint8_t* a = row + plan.x0s[ox];
    const uint8_t* b = row + plan.x1s[ox];
    const int wb = plan.wxs[ox], wa = 256 - wb;
    for (int k = 0; k < c; ++k) out[ox * c + k] = static_cast<uint16_t>(a[k] * wa + b[k] * wb);
  }
}

// Two horizontally resized rows blended vertically: (top * (256 - wy) + bottom * wy + 32768) >> 16,
// exactly (32-bit products; SSE2 forms them from 16-bit halves).
void BlendRowsV(const uint16_t* top, const uint16_t* bottom, int wy, size_t n, uint8_t* out) {
  size_t i = 0;
#ifdef __SSE2__
  const __m128i wt = _mm_set1_epi16(static_cast<int16_t>(256 - wy));
  const __m128i wb = _mm_set1_epi16(static_cast<int16_t>(wy));
  const __m128i half = _mm_set1_epi32(1 << 15);
  for (; i + 8 <= n; i += 8) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(top + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bottom + i));
    const __m128i tl = _mm_mullo_epi16(t, wt), th = _mm_mulhi_epu16(t, wt);
    const __m128i bl = _mm_mullo_epi16(b, wb), bh = _mm_mulhi_epu16(b, wb);
    __m128i lo = _mm_add_epi32(_mm_unpacklo_epi16(tl, th), _mm_unpacklo_epi16(bl, bh));
    __m128i hi = _mm_add_epi32(_mm_unpackhi_epi16(tl, th), _mm_unpackhi_epi16(bl, bh));
    lo = _mm_srli_epi32(_mm_add_epi32(lo, half), 16);
    hi = _mm_srli_epi32(_mm_add_epi32(hi, half), 16);
    const __m128i words = _mm_packs_epi32(lo, hi);  // each at most 255
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(words, words));
  }
#endif
  for (; i < n; ++i) {
    out[i] = static_cast<uint8_t>(
        (uint32_t{top[i]} * (256 - wy) + uint32_t{bottom[i]} * wy + (1u << 15)) >> 16);
  }
}

}  // namespace

// Bilinear in 8-bit fixed point, separable: each source row that an output row needs is resized
// horizontally once (two kept at a time: consecutive output rows share them), then pairs of them
// are blended. The result is that of the direct form, top = a * 256 + (b - a) * wx, bottom alike,
// v = top * 256 + (bottom - top) * wy, out = (v + 32768) >> 16, bit for bit. Sample positions and
// weights are computed in the whole image's coordinates (the same floating-point expressions as
// for the whole image), then moved by the part's integer origin.
Tensor CropResizeWithin(const Tensor& part, int origin_x, int origin_y, int full_w, int full_h,
                        double x, double y, double w, double h, int out_h, int out_w) {
  const int ih = static_cast<int>(part.shape[0]), iw = static_cast<int>(part.shape[1]);
  const int c = static_cast<int>(part.shape[2]);
  const uint8_t* src = part.values<uint8_t>();
  UninitBuffer out(static_cast<size_t>(out_h) * out_w * c);
  uint8_t* dst = out.data();
  const double sx = w / out_w, sy = h / out_h;
  constexpr int kOne = 256;  // weights in [0, 256]
  const size_t n = static_cast<size_t>(out_w) * c;
  // A column or row of the whole image, in the part (clamped: a part that holds every pixel read
  // is never clamped).
  auto column = [&](int fx) { return std::clamp(fx - origin_x, 0, iw - 1); };
  auto row = [&](int fy) { return std::clamp(fy - origin_y, 0, ih - 1); };
  HorizontalPlan plan;
  plan.x0s.resize(out_w), plan.x1s.resize(out_w), plan.wxs.resize(out_w);
  for (int ox = 0; ox < out_w; ++ox) {
    double fx = std::clamp(x + (ox + 0.5) * sx - 0.5, 0.0, static_cast<double>(full_w - 1));
    int x0 = static_cast<int>(fx);
    plan.x0s[ox] = column(x0) * c;
    plan.x1s[ox] = column(std::min(x0 + 1, full_w - 1)) * c;
    plan.wxs[ox] = static_cast<int>(std::lround((fx - x0) * kOne));
  }
#ifdef __SSE2__
  if (c == 3) {
    plan.weights.resize(static_cast<size_t>(out_w) * 8);
    const int row_bytes = iw * c;
    while (plan.simd_count < out_w && plan.x1s[plan.simd_count] == plan.x0s[plan.simd_count] + 3 &&
           plan.x0s[plan.simd_count] + 8 <= row_bytes) {
      const int ox = plan.simd_count++;
      const auto wb = static_cast<int16_t>(plan.wxs[ox]), wa = static_cast<int16_t>(kOne - wb);
      const int16_t lanes[8] = {wa, wa, wa, wb, wb, wb, 0, 0};
      std::memcpy(plan.weights.data() + 8 * ox, lanes, sizeof(lanes));
    }
  }
#endif
  const size_t stride = n + 4;  // room for ResizeRowH's 4th value
  std::vector<uint16_t> rows(2 * stride);
  int held[2] = {-1, -1};  // the part's row in each half of `rows`
  // The horizontally resized row `r` of the part, computed unless held; never evicts row `keep`.
  auto resized = [&](int r, int keep) -> const uint16_t* {
    for (int s = 0; s < 2; ++s)
      if (held[s] == r) return rows.data() + s * stride;
    const int s = held[0] == keep ? 1 : 0;
    ResizeRowH(src + static_cast<size_t>(r) * iw * c, plan, out_w, c, rows.data() + s * stride);
    held[s] = r;
    return rows.data() + s * stride;
  };
  for (int oy = 0; oy < out_h; ++oy) {
    double fy = std::clamp(y + (oy + 0.5) * sy - 0.5, 0.0, static_cast<double>(full_h - 1));
    int y0 = static_cast<int>(fy);
    const int r0 = row(y0), r1 = row(std::min(y0 + 1, full_h - 1));
    const int wy = static_cast<int>(std::lround((fy - y0) * kOne));
    const uint16_t* top = resized(r0, r1);
    const uint16_t* bottom = resized(r1, r0);
    BlendRowsV(top, bottom, wy, n, dst + static_cast<size_t>(oy) * n);
  }
  return Tensor{DType::kUint8, {out_h, out_w, c}, std::move(out).Finish()};
}

Tensor CropResize(const Tensor& image, double x, double y, double w, double h, int out_h,
                  int out_w) {
  return CropResizeWithin(image, 0, 0, static_cast<int>(image.shape[1]),
                          static_cast<int>(image.shape[0]), x, y, w, h, out_h, out_w);
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
  return EncodeJpeg(image, quality, "420", false);
}

absl::StatusOr<Buffer> EncodeJpeg(const Tensor& image, int quality, std::string_view subsampling,
                                  bool progressive) {
  const int c = static_cast<int>(image.shape[2]);
  int samp = TJSAMP_GRAY;
  if (c != 1) {
    if (subsampling == "444") {
      samp = TJSAMP_444;
    } else if (subsampling == "422") {
      samp = TJSAMP_422;
    } else if (subsampling == "420") {
      samp = TJSAMP_420;
    } else if (subsampling == "440") {
      samp = TJSAMP_440;
    } else if (subsampling == "411") {
      samp = TJSAMP_411;
    } else {
      return absl::InvalidArgumentError(StrCat("unknown chroma subsampling '", subsampling,
                                               "' (expected 444, 422, 420, 440 or 411)"));
    }
  }
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, image.values<uint8_t>(), static_cast<int>(image.shape[1]), 0,
                       static_cast<int>(image.shape[0]), c == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg,
                       &size, samp, quality, progressive ? TJFLAG_PROGRESSIVE : 0);
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
