// Fuzz target: a sequence of dispatcher RPCs built from the input bytes (well-formed requests with
// arbitrary values: ids, counts, specs, fingerprints, shardings, acknowledgements), called on a
// real Dispatcher with a journal. No call may crash or hit undefined behaviour, and the journal the
// dispatcher wrote must replay: a restarted dispatcher starts from it.
//
// The RPC methods are called directly (Dispatcher's public API), not over gRPC: the request
// parsing is protobuf's; what is fuzzed is the dispatcher's handling of whatever parses.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "stoker/core/logging.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/dispatcher/dispatcher.h"

namespace {

using namespace stoker::service;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "dispatcher_rpc_fuzzer: %s\n", what.c_str());
  std::abort();
}

// Reads values from the input; past its end every value is zero.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Mostly small ids and counts (they meet the ids the dispatcher hands out), sometimes extremes.
  int64_t Int() {
    uint8_t b = Byte();
    if (b < 200) return static_cast<int64_t>(b % 24) - 2;
    static constexpr int64_t kExtremes[] = {std::numeric_limits<int64_t>::max(),
                                            std::numeric_limits<int64_t>::min(),
                                            int64_t{1} << 62,
                                            (int64_t{1} << 62) + 1,
                                            int64_t{1} << 24,
                                            -(int64_t{1} << 40)};
    if (b < 250) return kExtremes[b % std::size(kExtremes)];
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | Byte();
    return static_cast<int64_t>(v);
  }
  template <size_t N>
  const char* Pick(const char* const (&options)[N]) {
    return options[Byte() % N];
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

const char* const kSpecs[] = {
    R"({"source": {"range": 5}})",
    R"({"source": {"range": 40}, "ops": [{"op": "batch", "size": 4}]})",
    R"({"source": {"range": 1}})",
    R"({"source": {"range": 0}})",
    "{not json",
    "",
    "[]",
    R"({"source": {"range": 5}, "ops": [{"op": "nope"}]})",
};
const char* const kShardings[] = {"", "dynamic", "off", "bogus"};
const char* const kCompressions[] = {"", "none", "zstd", "lz4", "brotli"};
const char* const kAddresses[] = {"127.0.0.1:1", "", "host:2", "127.0.0.1:1"};
const char* const kNames[] = {"", "a", "b", ""};

std::string Fingerprint(const std::string& spec) {
  auto json = nlohmann::json::parse(spec, nullptr, false);
  return json.is_discarded() ? "" : stoker::data::Pipeline::Fingerprint(json);
}

void RunCalls(Dispatcher* d, Input* in) {
  for (int calls = 0; calls < 64 && !in->empty(); ++calls) {
    switch (in->Byte() % 4) {
      case 0: {
        GetOrCreateJobRequest req;
        req.set_spec_json(in->Pick(kSpecs));
        // The spec's own fingerprint, usually; sometimes another spec's or none.
        uint8_t f = in->Byte() % 4;
        req.set_fingerprint(f == 0   ? Fingerprint(in->Pick(kSpecs))
                            : f == 1 ? ""
                                     : Fingerprint(req.spec_json()));
        req.set_num_samples(in->Int());
        req.set_job_name(in->Pick(kNames));
        // The modes as enums (3, 4: numbers no mode has), or unspecified with the deprecated
        // strings of a client built before the enums.
        req.set_sharding_mode(static_cast<ShardingMode>(in->Byte() % 4));
        req.set_compression_mode(static_cast<CompressionMode>(in->Byte() % 5));
        req.set_partial_round_mode(static_cast<PartialRoundMode>(in->Byte() % 4));
        req.set_on_fall_behind_mode(static_cast<OnFallBehindMode>(in->Byte() % 4));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        req.set_sharding(in->Pick(kShardings));
        req.set_compression(in->Pick(kCompressions));
#pragma GCC diagnostic pop
        req.set_num_epochs(in->Int());
        if (in->Byte() % 4 == 0) {  // resuming a checkpoint, with arbitrary pieces
          req.set_resuming(true);
          for (int n = in->Byte() % 4; n > 0; --n) {
            ResumePiece* p = req.add_resume();
            p->set_begin(in->Int());
            p->set_end(in->Int());
            p->set_exact(in->Byte() % 2 == 0);
          }
        }
        GetOrCreateJobResponse resp;
        (void)d->GetOrCreateJob(req, &resp);
        break;
      }
      case 1: {
        WorkerHeartbeatRequest req;
        req.set_worker_id(in->Int());
        req.set_address(in->Pick(kAddresses));
        req.set_failed_job(in->Int());
        req.set_task_error("fuzzed failure");
        for (int n = in->Byte() % 3; n > 0; --n) req.add_running_jobs(in->Int());
        for (int n = in->Byte() % 3; n > 0; --n) req.add_finished_jobs(in->Int());
        req.set_wait_ms(in->Int() % 4);  // the long poll is bounded anyway; keep runs fast
        WorkerHeartbeatResponse resp;
        (void)d->WorkerHeartbeat(req, &resp);
        break;
      }
      case 2: {
        GetSplitRequest req;
        req.set_worker_id(in->Int());
        req.set_job_id(in->Int());
        req.set_wanted_samples(in->Int());
        req.set_last_split_id(in->Int());
        GetSplitResponse resp;
        absl::Status s = d->GetSplit(req, &resp);
        if (s.ok() && resp.kind() == GetSplitResponse::SPLIT &&
            (resp.begin() < 0 || resp.end() <= resp.begin()))
          Fail("GetSplit handed out an empty or negative split");
        break;
      }
      case 3: {
        ClientHeartbeatRequest req;
        req.set_job_id(in->Int());
        req.set_client_id(in->Int());
        for (int n = in->Byte() % 6; n > 0; --n) req.add_completed_splits(in->Int());
        for (int n = in->Byte() % 3; n > 0; --n) req.add_ended_workers(in->Int());
        ClientHeartbeatResponse resp;
        (void)d->ClientHeartbeat(req, &resp);
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = [] {
    spdlog::set_level(spdlog::level::off);  // a dispatcher logs every job and worker
    return true;
  }();
  (void)quiet;
  std::string dir =
      (std::filesystem::temp_directory_path() / "dispatcher_rpc_fuzz.XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) Fail("mkdtemp failed");
  DispatcherOptions options;
  options.work_dir = dir;
  options.worker_timeout = std::chrono::milliseconds(40);
  {
    auto d = Dispatcher::Start(options);
    if (!d.ok()) Fail("start: " + d.status().ToString());
    Input in(data, size);
    RunCalls(d->get(), &in);
  }
  // Whatever the calls did, the journal they left must replay.
  auto restarted = Dispatcher::Start(options);
  if (!restarted.ok()) Fail("the journal does not replay: " + restarted.status().ToString());
  restarted->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
