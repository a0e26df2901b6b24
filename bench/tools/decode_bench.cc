// decode_bench DIR [--repeat N]: the decode-only ceiling for P3 (docs/pipeline.md). Loads every
// .jpg under DIR into memory, then decodes them on one thread with TurboJPEG at full scale and at
// reduced DCT scales, printing images/s per core for each; then the same at full scale through
// TurboJPEG's own API (tjDecompress2 to RGB, default accurate DCT), the library's own ceiling.
// Then what the fused decode_image + random_resized_crop 224 costs by parts, on windows drawn as
// random_resized_crop draws them (area 8-100%, aspect 3/4-4/3, fixed seed): the region decode
// alone, the region decode plus the crop-resize, and the entropy (Huffman) decode alone of the
// whole image (jpeg_read_coefficients: no IDCT, upsampling or colour conversion), the part of
// any decode of a baseline JPEG that cannot be skipped for the rows above a region.
#include <stdio.h>  // jpeglib.h needs FILE
#include <time.h>
// (after stdio.h)
#include <jpeglib.h>
#include <turbojpeg.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "stoker/data/image.h"

static double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--repeat N]\n", argv[0]);
    return 2;
  }
  int repeat = argc >= 4 ? std::atoi(argv[3]) : 1;
  std::vector<stoker::Buffer> images;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(argv[1])) {
    if (entry.path().extension() != ".jpg") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    images.push_back(stoker::Buffer::FromString(
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())));
  }
  if (images.empty()) {
    std::fprintf(stderr, "no .jpg files under %s\n", argv[1]);
    return 1;
  }
  const std::pair<int, int> scales[] = {{1, 1}, {3, 4}, {5, 8}, {1, 2}, {1, 4}, {1, 8}};
  for (auto [num, denom] : scales) {
    // Thread CPU time: the ceiling per core, unaffected by other load on the machine.
    double start = CpuSeconds();
    size_t decoded = 0;
    for (int r = 0; r < repeat; ++r) {
      for (const auto& jpeg : images) {
        auto t = stoker::data::DecodeImage(jpeg, 3, num, denom);
        if (!t.ok()) {
          std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
          return 1;
        }
        ++decoded;
      }
    }
    double s = CpuSeconds() - start;
    std::printf("decode scale %d/%d: %.1f images/s per core (CPU time)\n", num, denom, decoded / s);
  }
  // TurboJPEG's API directly, full scale, into one reused RGB buffer.
  tjhandle tj = tjInitDecompress();
  std::vector<unsigned char> rgb;
  double start = CpuSeconds();
  size_t decoded = 0;
  for (int r = 0; r < repeat; ++r) {
    for (const auto& jpeg : images) {
      int w = 0, h = 0, subsamp = 0, colorspace = 0;
      if (tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &subsamp, &colorspace) != 0 ||
          (rgb.resize(static_cast<size_t>(w) * h * 3),
           tjDecompress2(tj, jpeg.data(), jpeg.size(), rgb.data(), w, 0, h, TJPF_RGB, 0)) != 0) {
        std::fprintf(stderr, "%s\n", tjGetErrorStr2(tj));
        tjDestroy(tj);
        return 1;
      }
      ++decoded;
    }
  }
  double s = CpuSeconds() - start;
  tjDestroy(tj);
  std::printf("tjDecompress2 scale 1/1: %.1f images/s per core (CPU time)\n", decoded / s);

  // Windows as random_resized_crop draws them (its defaults), one per image and repeat.
  struct Window {
    int x, y, w, h;
  };
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<Window> windows;
  for (int r = 0; r < repeat; ++r) {
    for (const auto& jpeg : images) {
      auto size = stoker::data::JpegSize(jpeg);
      if (!size) return 1;
      Window win{0, 0, size->width, size->height};
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double area = size->width * double(size->height) * (0.08 + 0.92 * unit(rng));
        const double aspect = std::exp(std::log(0.75) + unit(rng) * std::log(16.0 / 9));
        const int w = static_cast<int>(std::lround(std::sqrt(area * aspect)));
        const int h = static_cast<int>(std::lround(std::sqrt(area / aspect)));
        if (w > 0 && h > 0 && w <= size->width && h <= size->height) {
          win = {static_cast<int>(rng() % (size->width - w + 1)),
                 static_cast<int>(rng() % (size->height - h + 1)), w, h};
          break;
        }
      }
      windows.push_back(win);
    }
  }
  for (bool resize : {false, true}) {
    start = CpuSeconds();
    decoded = 0;
    for (int r = 0; r < repeat; ++r) {
      for (size_t i = 0; i < images.size(); ++i, ++decoded) {
        const Window& win = windows[decoded];
        // One pixel of margin each way, as the fused op asks.
        const int x0 = std::max(0, win.x - 1), y0 = std::max(0, win.y - 1);
        auto region = stoker::data::DecodeJpegRegion(images[i], 3, 1, x0, y0, win.w + 2, win.h + 2);
        if (!region.ok()) {
          std::fprintf(stderr, "%s\n", std::string(region.status().message()).c_str());
          return 1;
        }
        if (resize) {
          stoker::data::CropResize(region->image, win.x - region->x, win.y - region->y, win.w,
                                   win.h, 224, 224);
        }
      }
    }
    s = CpuSeconds() - start;
    std::printf(
        "region decode%s (random_resized_crop windows): %.1f images/s per core (CPU time)\n",
        resize ? " + crop-resize to 224" : "", decoded / s);
  }
  start = CpuSeconds();
  decoded = 0;
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_decompress(&cinfo);
  for (int r = 0; r < repeat; ++r) {
    for (const auto& jpeg : images) {
      jpeg_mem_src(&cinfo, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
      jpeg_read_header(&cinfo, TRUE);
      jpeg_read_coefficients(&cinfo);
      jpeg_finish_decompress(&cinfo);
      ++decoded;
    }
  }
  jpeg_destroy_decompress(&cinfo);
  s = CpuSeconds() - start;
  std::printf(
      "entropy decode only (jpeg_read_coefficients), whole image: %.1f images/s per core "
      "(CPU time)\n",
      decoded / s);
  return 0;
}
