// stoker-bench-samples DATASET_URL MODE BATCHES BATCH_SIZE SEED [KEYS_OUT]: reads BATCHES
// random-order minibatches of BATCH_SIZE samples from a stoker dataset and prints one JSON line
// {"samples", "bytes", "seconds", "cpu_seconds", "requests"} (cpu_seconds: user + system time of
// the process during the reads). The indices are the first BATCHES * BATCH_SIZE of a
// permutation of the dataset fixed by SEED; with KEYS_OUT, their keys are written there (one a
// line, in read order) so that a peer can read the very same samples. MODE:
//   batched     one ShardedDataset::ReadSamples call per minibatch (grouped by shard, coalesced)
//   per-sample  one read per sample, 16 in flight at a time (the same bytes, no batching)
//   pipelined   reads of 32 samples, 8 in flight at a time: a pipeline's dataset source once its
//               read-ahead has grown (src/stoker/data/ops/source_ops.cc)
// Before the timed reads, the first two minibatches are read once untimed (in the same mode), so
// that the figures are a long-running reader's: its read buffers recycled by the buffer pool
// instead of page-faulted in, as a fresh process must.
// Used by bench/suites/format.py and bench/suites/local_io.py.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>

#include "absl/synchronization/mutex.h"
#include "stoker/format/sharded_dataset.h"
#include "stoker/io/http/http_transport.h"

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(
        stderr,
        "usage: %s DATASET_URL batched|per-sample|pipelined BATCHES BATCH_SIZE SEED [KEYS_OUT]\n",
        argv[0]);
    return 2;
  }
  std::string mode = argv[2];
  uint64_t batches = std::stoull(argv[3]), batch_size = std::stoull(argv[4]);
  auto ds = stoker::format::ShardedDataset::Open(argv[1]);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ds.status().message()).c_str());
    return 1;
  }
  std::vector<uint64_t> order((*ds)->size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(std::stoull(argv[5])));
  order.resize(std::min<uint64_t>(order.size(), batches * batch_size));
  if (argc == 7) {
    FILE* keys = std::fopen(argv[6], "w");
    if (keys == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", argv[6]);
      return 1;
    }
    for (uint64_t index : order) std::fprintf(keys, "%s\n", std::string((*ds)->key(index)).c_str());
    std::fclose(keys);
  }

  uint64_t samples = 0, bytes = 0;
  auto count = [&](const std::vector<stoker::format::Sample>& got) {
    for (const auto& s : got) {
      ++samples;
      for (const auto& field : s.fields) bytes += field.value.size();
    }
  };
  uint64_t requests_before = stoker::io::HttpTransport::Default().stats().requests_sent;
  auto cpu_seconds = [] {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
           (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  };
  // Reads `indices` in MODE; returns the process exit code (0: read).
  auto read_all = [&](const std::vector<uint64_t>& indices) -> int {
    if (mode == "batched") {
      for (size_t first = 0; first < indices.size(); first += batch_size) {
        size_t n = std::min<size_t>(batch_size, indices.size() - first);
        auto got = (*ds)->ReadSamples(std::span<const uint64_t>(indices.data() + first, n));
        if (!got.ok()) {
          std::fprintf(stderr, "%s\n", std::string(got.status().message()).c_str());
          return 1;
        }
        count(*got);
      }
    } else if (mode == "per-sample" || mode == "pipelined") {
      // per-sample: reads of one sample, 16 in flight; pipelined: reads of 32 samples, 8 in
      // flight (what a pipeline's dataset source does once its read-ahead has grown).
      const size_t chunk = mode == "per-sample" ? 1 : 32;
      struct Flight {
        int reads = 0;
        int max;
      } flight{0, mode == "per-sample" ? 16 : 8};
      absl::Mutex mu;
      absl::Status error;
      for (size_t first = 0; first < indices.size(); first += chunk) {
        absl::MutexLock lock(&mu);
        mu.Await(absl::Condition(
            +[](Flight* f) { return f->reads < f->max; }, &flight));
        ++flight.reads;
        mu.Unlock();
        (*ds)->ReadSamplesAsync(
            std::vector<uint64_t>(indices.begin() + first,
                                  indices.begin() + std::min(first + chunk, indices.size())),
            [&](absl::StatusOr<std::vector<stoker::format::Sample>> got) {
              absl::MutexLock inner(&mu);
              --flight.reads;
              if (got.ok()) {
                count(*got);
              } else if (error.ok()) {
                error = got.status();
              }
            });
        mu.Lock();
      }
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](Flight* f) { return f->reads == 0; }, &flight));
      if (!error.ok()) {
        std::fprintf(stderr, "%s\n", std::string(error.message()).c_str());
        return 1;
      }
    } else {
      std::fprintf(stderr, "unknown mode '%s' (batched, per-sample or pipelined)\n", mode.c_str());
      return 2;
    }
    return 0;
  };
  std::vector<uint64_t> warm_up(order.begin(),
                                order.begin() + std::min<size_t>(order.size(), 2 * batch_size));
  if (int rc = read_all(warm_up); rc != 0) return rc;
  samples = bytes = 0;
  requests_before = stoker::io::HttpTransport::Default().stats().requests_sent;
  double cpu_start = cpu_seconds();
  auto start = std::chrono::steady_clock::now();
  if (int rc = read_all(order); rc != 0) return rc;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double cpu = cpu_seconds() - cpu_start;
  nlohmann::json out = {
      {"samples", samples},
      {"bytes", bytes},
      {"seconds", seconds},
      {"cpu_seconds", cpu},
      {"requests", stoker::io::HttpTransport::Default().stats().requests_sent - requests_before}};
  std::printf("%s\n", out.dump().c_str());
  return samples == order.size() ? 0 : 1;
}
