// decode_bench DIR [--repeat N]: the decode-only ceiling for P3 (docs/pipeline.md). Loads every
// .jpg under DIR into memory, then decodes them on one thread with TurboJPEG at full scale and at
// reduced DCT scales, printing images/s per core for each; then the same at full scale through
// TurboJPEG's own API (tjDecompress2 to RGB, default accurate DCT), the library's own ceiling.
#include <time.h>
#include <turbojpeg.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
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
  return 0;
}
