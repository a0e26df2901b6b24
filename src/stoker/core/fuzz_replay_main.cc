// Driver for fuzz targets in ordinary builds: feeds every file under the given paths to
// LLVMFuzzerTestOneInput once, so the checked-in corpus is a regression test without libFuzzer.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path root(argv[i]);
    if (!std::filesystem::exists(root)) {
      std::fprintf(stderr, "fuzz replay: corpus %s does not exist\n", argv[i]);
      return 1;
    }
    auto run = [&](const std::filesystem::path& p) {
      std::ifstream in(p, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++files;
    };
    if (std::filesystem::is_directory(root)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(root))
        if (e.is_regular_file()) run(e.path());
    } else {
      run(root);
    }
  }
  std::printf("fuzz replay: %d inputs, no crash\n", files);
  return 0;
}
