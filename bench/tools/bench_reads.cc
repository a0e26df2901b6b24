// stoker-bench-reads URL RANGES_FILE: reads the byte ranges listed in RANGES_FILE (one
// "offset length" pair a line) from the object at URL with one RangedReader::ReadRanges call (the
// batched read API: coalescing, parallel parts, hedging), checks every range came back whole, and
// prints one JSON line: {"seconds", "bytes", "ranges", "requests"}. Used by bench/run.py (P2).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "stoker/io/http/http_transport.h"
#include "stoker/io/read/ranged_reader.h"
#include "stoker/io/url.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s URL RANGES_FILE\n", argv[0]);
    return 2;
  }
  std::vector<stoker::io::ByteRange> ranges;
  std::ifstream in(argv[2]);
  uint64_t offset = 0, length = 0;
  while (in >> offset >> length) ranges.push_back({offset, length});
  auto target = stoker::io::OpenUrl(argv[1]);
  if (!target.ok()) {
    std::fprintf(stderr, "%s\n", std::string(target.status().message()).c_str());
    return 1;
  }
  stoker::io::RangedReader reader(target->store);
  uint64_t requests_before = stoker::io::HttpTransport::Default().stats().requests_sent;
  auto start = std::chrono::steady_clock::now();
  auto result = reader.ReadRanges(target->key, ranges);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if ((*result)[i].size() != ranges[i].length) {
      std::fprintf(stderr, "range %zu came back with %zu bytes, expected %llu\n", i,
                   (*result)[i].size(), static_cast<unsigned long long>(ranges[i].length));
      return 1;
    }
    bytes += (*result)[i].size();
  }
  nlohmann::json out = {
      {"seconds", seconds},
      {"bytes", bytes},
      {"ranges", ranges.size()},
      {"requests", stoker::io::HttpTransport::Default().stats().requests_sent - requests_before}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
