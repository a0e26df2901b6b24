// make_test_images DIR [--classes N] [--per-class N] [--width W] [--height H] [--quality Q]
//                      [--style noise|photo]
// Writes DIR/class<c>/img<i>.jpg, for tests, manual runs of `stoker run` and the benchmarks:
//  - noise (the default): smooth gradients plus white noise, about 80-110 KiB at 500x375,
//    quality 90 (fast to make; not the statistics of a photo);
//  - photo: a "dead leaves" image, the standard model of natural-image statistics: occluding
//    shapes whose sizes follow a power law (so the spectrum falls off as about 1/f, with sharp
//    edges at every scale), each shaded and textured with multi-octave noise, plus a little sensor
//    noise: about 80 KiB at 500x375, quality 90, like ImageNet's photos.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "stoker/data/image.h"

namespace {

uint8_t Clamp(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

// Value noise in [-1, 1] with octaves of 32, 16, 8, 4 and 2 pixels, amplitude proportional to the
// octave's size (an about 1/f spectrum): `lattice` holds random values on each octave's grid.
class Texture {
 public:
  Texture(int width, int height, std::mt19937& gen) : width_(width), height_(height) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (int cell : {32, 16, 8, 4, 2}) {
      Octave o{cell, width / cell + 2, {}};
      o.values.resize(static_cast<size_t>(o.columns) * (height / cell + 2));
      for (double& v : o.values) v = u(gen);
      octaves_.push_back(std::move(o));
    }
    field_.resize(static_cast<size_t>(width) * height);
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) field_[static_cast<size_t>(y) * width + x] = Compute(x, y);
  }
  double At(int x, int y) const { return field_[static_cast<size_t>(y) * width_ + x]; }

 private:
  struct Octave {
    int cell, columns;
    std::vector<double> values;
  };
  double Compute(int x, int y) const {
    double sum = 0, norm = 0;
    for (const Octave& o : octaves_) {
      const double fx = static_cast<double>(x) / o.cell, fy = static_cast<double>(y) / o.cell;
      const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
      const double tx = fx - x0, ty = fy - y0;
      auto v = [&](int cx, int cy) { return o.values[static_cast<size_t>(cy) * o.columns + cx]; };
      const double top = v(x0, y0) * (1 - tx) + v(x0 + 1, y0) * tx;
      const double bottom = v(x0, y0 + 1) * (1 - tx) + v(x0 + 1, y0 + 1) * tx;
      sum += o.cell * (top * (1 - ty) + bottom * ty);
      norm += o.cell;
    }
    return sum / norm;
  }
  int width_, height_;
  std::vector<Octave> octaves_;
  std::vector<double> field_;
};

// One dead-leaves image (see the header comment).
void PhotoLike(int width, int height, std::mt19937& gen, uint8_t* rgb) {
  std::uniform_real_distribution<double> u(0, 1);
  const Texture texture(width, height, gen);
  const double scale = std::sqrt(static_cast<double>(width) * height) / 433.0;  // 1 at 500x375
  // The background: a vertical gradient between two colours.
  double top[3], bottom[3];
  for (int k = 0; k < 3; ++k) top[k] = 40 + 200 * u(gen), bottom[k] = 20 + 160 * u(gen);
  for (int y = 0; y < height; ++y) {
    const double t = static_cast<double>(y) / std::max(1, height - 1);
    for (int x = 0; x < width; ++x)
      for (int k = 0; k < 3; ++k)
        rgb[(static_cast<size_t>(y) * width + x) * 3 + k] = Clamp(top[k] * (1 - t) + bottom[k] * t);
  }
  // Shapes from back to front; radius r with P(R > r) ~ 1/r^2, from 4 to 160 pixels (at 500x375).
  const int shapes = static_cast<int>(1200 * scale * scale);
  for (int s = 0; s < shapes; ++s) {
    const double r = std::min(160.0, 4.0 / std::sqrt(1 - u(gen) * 0.9999)) * scale;
    const double cx = u(gen) * width, cy = u(gen) * height;
    const double aspect = 0.5 + u(gen), angle = u(gen) * M_PI;
    const double ca = std::cos(angle), sa = std::sin(angle);
    const double grey = 30 + 200 * u(gen);
    double colour[3];
    for (double& c : colour) c = grey + (u(gen) - 0.5) * 120;  // mostly muted, some saturated
    const double gx = (u(gen) - 0.5) * 60 / r, gy = (u(gen) - 0.5) * 60 / r;  // shading
    const double detail = 8 + 40 * u(gen) * u(gen);                           // texture strength
    const int x0 = std::max(0, static_cast<int>(cx - r * 1.5)),
              x1 = std::min(width - 1, static_cast<int>(cx + r * 1.5));
    const int y0 = std::max(0, static_cast<int>(cy - r * 1.5)),
              y1 = std::min(height - 1, static_cast<int>(cy + r * 1.5));
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) {
        const double dx = x - cx, dy = y - cy;
        const double a = (dx * ca + dy * sa) / (r * aspect), b = (-dx * sa + dy * ca) * aspect / r;
        if (a * a + b * b > 1) continue;
        const double shade = gx * dx + gy * dy + detail * texture.At(x, y);
        uint8_t* p = rgb + (static_cast<size_t>(y) * width + x) * 3;
        for (int k = 0; k < 3; ++k) p[k] = Clamp(colour[k] + shade);
      }
    }
  }
  std::normal_distribution<double> sensor(0, 2.0);
  for (size_t i = 0, n = static_cast<size_t>(width) * height * 3; i < n; ++i)
    rgb[i] = Clamp(rgb[i] + sensor(gen));
}

}  // namespace

int main(int argc, char** argv) {
  // DIR first; a first argument that looks like a flag (--help) is not taken for a folder name.
  if (argc < 2 || argv[1][0] == '-') {
    const bool help =
        argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h");
    std::fprintf(help ? stdout : stderr,
                 "usage: %s DIR [--classes N] [--per-class N] [--width W] [--height H] "
                 "[--quality Q] [--style noise|photo]\n",
                 argv[0]);
    return help ? 0 : 2;
  }
  std::string dir = argv[1];
  int classes = 4, per_class = 32, width = 500, height = 375, quality = 90;
  bool photo = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (flag == "--style" &&
        (std::strcmp(argv[i + 1], "photo") == 0 || std::strcmp(argv[i + 1], "noise") == 0)) {
      photo = std::strcmp(argv[i + 1], "photo") == 0;
    } else if (flag == "--classes")
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
      if (photo) {
        PhotoLike(width, height, gen, pixels.data());
      } else {
        for (int y = 0; y < height; ++y) {
          for (int x = 0; x < width; ++x) {
            uint8_t* p = pixels.data() + (static_cast<size_t>(y) * width + x) * 3;
            int noise = static_cast<int>(gen() % 48);
            p[0] = static_cast<uint8_t>((x * 255 / width + i * 7 + noise) & 255);
            p[1] = static_cast<uint8_t>((y * 255 / height + c * 50 + noise / 2) & 255);
            p[2] = static_cast<uint8_t>(((x + y) / 4 + noise) & 255);
          }
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
