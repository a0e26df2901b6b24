// make_test_images DIR [--classes N] [--per-class N] [--width W] [--height H] [--quality Q]
// Writes DIR/class<c>/img<i>.jpg: ImageNet-like JPEGs (smooth gradients plus noise, about
// 80-110 KiB at 500x375, quality 90), for manual runs of `stoker run` and the P3 benchmark.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "stoker/data/image.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DIR [--classes N] [--per-class N] [--width W] [--height H] "
                 "[--quality Q]\n",
                 argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  int classes = 4, per_class = 32, width = 500, height = 375, quality = 90;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (flag == "--classes")
      classes = value;
    else if (flag == "--per-class")
      per_class = value;
    else if (flag == "--width")
      width = value;
    else if (flag == "--height")
      height = value;
    else if (flag == "--quality")
      quality = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::mt19937 gen(1234);
  for (int c = 0; c < classes; ++c) {
    std::filesystem::path folder = std::filesystem::path(dir) / ("class" + std::to_string(c));
    std::filesystem::create_directories(folder);
    for (int i = 0; i < per_class; ++i) {
      stoker::MutableBuffer pixels(static_cast<size_t>(width) * height * 3);
      for (int y = 0; y < height; ++y) {
        for (int x = 0; x < width; ++x) {
          uint8_t* p = pixels.data() + (static_cast<size_t>(y) * width + x) * 3;
          int noise = static_cast<int>(gen() % 48);
          p[0] = static_cast<uint8_t>((x * 255 / width + i * 7 + noise) & 255);
          p[1] = static_cast<uint8_t>((y * 255 / height + c * 50 + noise / 2) & 255);
          p[2] = static_cast<uint8_t>(((x + y) / 4 + noise) & 255);
        }
      }
      stoker::data::Tensor image{
          stoker::data::DType::kUint8, {height, width, 3}, std::move(pixels).Finish()};
      auto jpeg = stoker::data::EncodeJpeg(image, quality);
      if (!jpeg.ok()) {
        std::fprintf(stderr, "%s\n", std::string(jpeg.status().message()).c_str());
        return 1;
      }
      char name[32];
      std::snprintf(name, sizeof(name), "img%05d.jpg", i);
      std::ofstream(folder / name, std::ios::binary).write(jpeg->chars(), jpeg->size());
    }
  }
  return 0;
}
