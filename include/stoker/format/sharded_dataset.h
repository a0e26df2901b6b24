// Reading a stoker dataset (docs/format.md): the sample directory and batched reads.
//
// ---------------------------------------------------------------------------------------------
// API for the pipeline (src/stoker/data/)
//
//   By sample index (converted datasets: a prefix with manifest.json and shards):
//     ASSIGN_OR_RETURN(std::shared_ptr<format::ShardedDataset> ds,
//                      format::ShardedDataset::Open("s3://bucket/train/", {.on_corrupt =
//                      OnCorrupt::kSkip}));
//     uint64_t n = ds->size();                  // number of samples
//     std::string_view k = ds->key(i);          // key of sample i, 0 <= i < n (no I/O)
//     ASSIGN_OR_RETURN(std::vector<Sample> batch, ds->ReadSamples({17, 3, 99}));
//       // batch[j].key, batch[j].index, batch[j].fields[...] = {name, Buffer}; same order as
//       asked.
//       // Samples of one shard are read as few coalesced range requests; fields are zero-copy
//       // slices of the bytes read (unless the record is zstd-compressed).
//       // Under kSkip a corrupt sample is left out of the result and counted in
//       // ds->corruption_report(); under kFail the call fails with DataLoss (URL, offset, key).
//     ds->ReadSamplesAsync(indices, [](absl::StatusOr<std::vector<Sample>> r) { ... });
//
//   Streaming (TFRecord files, WebDataset tar files, shards; see sample_stream.h):
//     std::unique_ptr<SampleStream> s = format::OpenSampleStreams({"s3://b/a.tar",
//     "s3://b/b.tar"}); while (true) { ASSIGN_OR_RETURN(std::optional<Sample> x, s->Next()); if
//     (!x) break; ... }
//
//   ShardedDataset::Open accepts a dataset prefix ("dir/", "s3://b/p"), its manifest.json URL, or a
//   single shard URL (*.stk), which is read as a one-shard dataset.
// ---------------------------------------------------------------------------------------------
//
// Thread safety: a ShardedDataset is immutable after Open and every method is thread-safe.
// Destroying a ShardedDataset waits for its reads in flight; do not drop the last reference inside
// a `done` callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "stoker/format/manifest.h"
#include "stoker/format/sample.h"
#include "stoker/format/sample_directory.h"
#include "stoker/format/sample_stream.h"
#include "stoker/io/object_store.h"
#include "stoker/io/read/ranged_reader.h"

namespace stoker::format {

struct DatasetOptions {
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  // Shards whose footers are fetched at the same time while opening.
  int open_parallelism = 64;
  // How batched reads are coalesced and split. Unset: the RangedReader's defaults (tuned for S3)
  // for network stores, and limits for a local disk (CoalesceLimitsFor(0.1 ms, 2 GB/s): holes up
  // to 200 KB) for local files and memory, where reading through a large hole costs more than a
  // separate request.
  std::optional<io::ReaderOptions> reader;
  // Direct I/O (O_DIRECT, no page cache) for datasets on local files (docs/reads.md). kAuto uses
  // it when the dataset's bytes exceed `direct_io_ram_share` × the machine's RAM: such a dataset
  // does not stay in the page cache anyway, and reading it through the cache would evict
  // everything else. Under kAuto, STOKER_DIRECT_IO=on|off|auto and STOKER_DIRECT_IO_RAM_SHARE
  // (e.g. 0.25) override these defaults.
  enum class DirectIo { kAuto, kOn, kOff };
  DirectIo direct_io = DirectIo::kAuto;
  double direct_io_ram_share = 0.5;
};

class ShardedDataset {
 public:
  // Loads the manifest and every shard's index footer (concurrently) and checks that they agree.
  // Errors name the URL at fault: NotFound (no manifest / shard), DataLoss (bad footer or index),
  // FailedPrecondition (manifest disagrees with a shard; re-run `stoker convert`).
  static absl::StatusOr<std::shared_ptr<ShardedDataset>> Open(std::string_view url,
                                                              DatasetOptions options = {});
  // The same over a given store (e.g. a test double or a caching wrapper): `key` names the dataset
  // prefix, its manifest.json or a single shard, as the URL does above.
  static absl::StatusOr<std::shared_ptr<ShardedDataset>> Open(
      std::shared_ptr<io::ObjectStore> store, std::string_view key, DatasetOptions options = {});

  uint64_t size() const { return directory_.size(); }
  std::string_view key(uint64_t index) const { return directory_.key(index); }
  const Manifest& manifest() const { return manifest_; }
  const SampleDirectory& directory() const { return directory_; }
  // URL of shard `shard` (manifest order).
  std::string ShardUrl(size_t shard) const;
  // The dataset's prefix URL.
  const std::string& url() const { return base_url_; }
  // The store batched reads go through (for local datasets: the page-cache or O_DIRECT store).
  io::ObjectStore& store() const { return *store_; }
  // How batched reads are planned (coalescing limits, parts in flight).
  const io::ReaderOptions& reader_options() const;
  // Store key of shard `shard`.
  const std::string& shard_key(size_t shard) const { return shard_keys_[shard]; }

  // Reads `indices` (any order, repeats allowed) and returns the samples in the same order,
  // minus skipped corrupt ones under kSkip. OutOfRange for an index >= size().
  absl::StatusOr<std::vector<Sample>> ReadSamples(std::span<const uint64_t> indices) const;
  absl::StatusOr<std::vector<Sample>> ReadSamples(std::initializer_list<uint64_t> indices) const {
    return ReadSamples(std::span<const uint64_t>(indices.begin(), indices.size()));
  }
  // The same, asynchronous: `done` runs exactly once, on any thread. Records are checked (CRC)
  // and decompressed on the thread that completes each shard's read (an I/O thread).
  void ReadSamplesAsync(
      std::vector<uint64_t> indices,
      absl::AnyInvocable<void(absl::StatusOr<std::vector<Sample>>) &&> done) const;
  // Runs decoding work elsewhere: called on an I/O thread (possibly on several at once) with a
  // closure that checks and decodes one shard's records of the batch; it must run the closure
  // exactly once, on any thread, and return quickly. `done` then runs inside the last closure.
  using DecodeRunner = std::function<void(absl::AnyInvocable<void() &&> decode)>;
  // The same with the decoding handed to `run_decode` (e.g. queued on a CPU pool) instead of done
  // on the I/O thread. The caller keeps the dataset alive until `done` has run.
  void ReadSamplesAsync(std::vector<uint64_t> indices,
                        absl::AnyInvocable<void(absl::StatusOr<std::vector<Sample>>) &&> done,
                        DecodeRunner run_decode) const;
  absl::StatusOr<Sample> ReadSample(uint64_t index) const;

  // What kSkip left out so far.
  const CorruptionReport& corruption_report() const { return *report_; }

  ShardedDataset(std::string base_url, std::shared_ptr<io::ObjectStore> store,
                 std::vector<std::string> shard_keys, Manifest manifest, SampleDirectory directory,
                 DatasetOptions options);
  ~ShardedDataset();

 private:
  std::string base_url_;
  std::shared_ptr<io::ObjectStore> store_;
  std::vector<std::string> shard_keys_;  // store keys, manifest order
  Manifest manifest_;
  SampleDirectory directory_;
  DatasetOptions options_;
  std::shared_ptr<CorruptionReport> report_;
  // Last, so that it is destroyed first: its destructor waits for reads whose callbacks use the
  // members above.
  std::shared_ptr<io::RangedReader> reader_;
};

// Checks every record of shard `url` (CRC, structure, key against the index), reading it
// sequentially. Returns the number of good records, or the first DataLoss (URL, offset, key).
// With `report`, corrupt records are counted there and the check goes on to the end; a shard whose
// header, footer or index is bad still fails.
absl::StatusOr<uint64_t> VerifyShard(std::string_view url,
                                     std::shared_ptr<CorruptionReport> report = nullptr);

}  // namespace stoker::format
