// stoker-bench-dispatcher: how many splits per second one dispatcher hands out
// (dispatcher capacity, docs/protocol.md). Used by bench/suites/service.py.
//
// It starts an in-process stoker::service::Dispatcher on a free port, creates one dynamic job with
// a practically endless sample count, registers --clients fake workers with WorkerHeartbeat, then
// runs --clients threads, each with its own gRPC channel (its own TCP connection), that call
// GetSplit as fast as the replies come, for --seconds. Every call that hands out a split is one
// journaled update (create_split), so with the journal on the figure is bounded by the disk's
// fdatasync rate.
//
// Modes, each with the journal off (no work dir) and on (a fresh folder under --work-dir):
//   split      GetSplit only.
//   split+ack  GetSplit, then ClientHeartbeat acknowledging that split (two updates per split: the
//              lease and the acknowledgement), as a worker and its consumer would.
//
// Prints one JSON line per run:
//   {"mode", "journal", "clients", "seconds", "splits", "splits_per_s", "rpcs_per_s",
//    "p50_ms", "p99_ms"}  (latencies of one split: GetSplit, plus the ack in split+ack)
// Exits non-zero if an RPC fails.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <latch>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/pipeline.h"
#include "stoker/service.grpc.pb.h"
#include "stoker/service/dispatcher/dispatcher.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace svc = stoker::service;

// A channel of its own: gRPC shares connections between channels with equal arguments unless the
// subchannel pool is local.
std::unique_ptr<svc::DispatcherService::Stub> NewStub(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return svc::DispatcherService::NewStub(grpc::CreateCustomChannel(
      stoker::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
}

std::string Describe(const grpc::Status& s, const char* what) {
  return stoker::StrCat(what, " failed: ", s.error_message(), " (code ",
                        static_cast<int>(s.error_code()), ")");
}

struct ThreadResult {
  int64_t splits = 0;
  int64_t rpcs = 0;
  std::vector<double> latencies_ms;
  std::string error;
};

// One fake worker (and, with `ack`, its consumer) asking for splits until `stop`.
void RunClient(int port, int64_t job_id, int64_t wanted_samples, bool ack, std::latch* ready,
               const std::atomic<bool>* go, const std::atomic<bool>* stop, ThreadResult* out) {
  auto stub = NewStub(port);
  auto fail = [&](std::string message) {
    out->error = std::move(message);
    ready->count_down();
  };
  // Register as a worker (id 0: the dispatcher assigns one); this also opens the connection.
  svc::WorkerHeartbeatRequest hb;
  hb.set_address("127.0.0.1:1");  // never dialled: no consumer reads from these workers
  hb.set_wait_ms(0);
  svc::WorkerHeartbeatResponse hb_resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub->WorkerHeartbeat(&ctx, hb, &hb_resp);
    if (!s.ok()) return fail(Describe(s, "WorkerHeartbeat"));
  }
  int64_t client_id = 0;
  if (ack) {
    svc::ClientHeartbeatRequest req;
    req.set_job_id(job_id);
    svc::ClientHeartbeatResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub->ClientHeartbeat(&ctx, req, &resp);
    if (!s.ok()) return fail(Describe(s, "ClientHeartbeat"));
    client_id = resp.client_id();
  }
  ready->count_down();
  while (!go->load()) std::this_thread::yield();

  svc::GetSplitRequest req;
  req.set_worker_id(hb_resp.worker_id());
  req.set_job_id(job_id);
  req.set_wanted_samples(wanted_samples);
  req.set_last_split_id(-1);
  svc::ClientHeartbeatRequest ack_req;
  ack_req.set_job_id(job_id);
  ack_req.set_client_id(client_id);
  while (!stop->load(std::memory_order_relaxed)) {
    auto start = Clock::now();
    svc::GetSplitResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub->GetSplit(&ctx, req, &resp);
    ++out->rpcs;
    if (!s.ok()) {
      out->error = Describe(s, "GetSplit");
      return;
    }
    if (resp.kind() != svc::GetSplitResponse::SPLIT) {
      out->error = stoker::StrCat("GetSplit answered kind ", static_cast<int>(resp.kind()),
                                  " instead of a split (is the job's sample count exhausted?)");
      return;
    }
    req.set_last_split_id(resp.split_id());
    if (ack) {
      ack_req.clear_completed_splits();
      ack_req.add_completed_splits(resp.split_id());
      svc::ClientHeartbeatResponse ack_resp;
      grpc::ClientContext ack_ctx;
      grpc::Status as = stub->ClientHeartbeat(&ack_ctx, ack_req, &ack_resp);
      ++out->rpcs;
      if (!as.ok()) {
        out->error = Describe(as, "ClientHeartbeat");
        return;
      }
    }
    ++out->splits;
    out->latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
}

double Percentile(std::vector<double> xs, double p) {
  if (xs.empty()) return 0;
  size_t i = std::min(xs.size() - 1, static_cast<size_t>(p * static_cast<double>(xs.size())));
  std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(i), xs.end());
  return xs[i];
}

// One run: a fresh dispatcher (journal in `work_dir`, or none when empty), one job, `clients`
// threads for `seconds`. Returns false (after printing why) if an RPC failed.
bool RunOnce(const std::string& mode, const std::string& work_dir, int clients, double seconds,
             int64_t wanted_samples) {
  svc::DispatcherOptions options;
  options.work_dir = work_dir;
  options.port = 0;
  options.worker_timeout = std::chrono::minutes(10);  // fake workers heartbeat only once
  auto dispatcher = svc::Dispatcher::Start(options);
  if (!dispatcher.ok()) {
    std::fprintf(stderr, "starting the dispatcher: %s\n", dispatcher.status().ToString().c_str());
    return false;
  }
  const int port = (*dispatcher)->port();
  int64_t job_id = 0;
  {
    auto stub = NewStub(port);
    svc::GetOrCreateJobRequest req;
    const std::string spec = R"({"source": {"range": 1}, "ops": []})";  // never run: no worker
    req.set_spec_json(spec);
    req.set_fingerprint(stoker::data::Pipeline::Fingerprint(nlohmann::json::parse(spec)));
    req.set_num_samples(int64_t{1} << 50);
    svc::GetOrCreateJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub->GetOrCreateJob(&ctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", Describe(s, "GetOrCreateJob").c_str());
      return false;
    }
    job_id = resp.job_id();
  }
  const bool ack = mode == "split+ack";
  std::vector<ThreadResult> results(clients);
  std::latch ready(clients);
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (int i = 0; i < clients; ++i) {
    threads.push_back(stoker::StartThread("bench-client", [&, i] {
      RunClient(port, job_id, wanted_samples, ack, &ready, &go, &stop, &results[i]);
    }));
  }
  ready.wait();
  auto start = Clock::now();
  go = true;
  // A benchmark's measuring window, not synchronisation: the threads stop when it ends.
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  int64_t splits = 0, rpcs = 0;
  std::vector<double> latencies;
  for (const ThreadResult& r : results) {
    if (!r.error.empty()) {
      std::fprintf(stderr, "stoker-bench-dispatcher: %s\n", r.error.c_str());
      return false;
    }
    splits += r.splits;
    rpcs += r.rpcs;
    latencies.insert(latencies.end(), r.latencies_ms.begin(), r.latencies_ms.end());
  }
  nlohmann::json line = {{"mode", mode},
                         {"journal", !work_dir.empty()},
                         {"clients", clients},
                         {"seconds", elapsed},
                         {"splits", splits},
                         {"splits_per_s", static_cast<double>(splits) / elapsed},
                         {"rpcs_per_s", static_cast<double>(rpcs) / elapsed},
                         {"p50_ms", Percentile(latencies, 0.5)},
                         {"p99_ms", Percentile(latencies, 0.99)}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Splits per second served by an in-process dispatcher over gRPC"};
  std::string work_dir;
  int clients = 4;
  double seconds = 3;
  int64_t wanted_samples = 16;
  std::vector<std::string> modes = {"split", "split+ack"};
  app.add_option("--work-dir", work_dir,
                 "folder for the journal runs (a fresh sub-folder per run); required")
      ->required();
  app.add_option("--clients", clients, "concurrent fake workers, each on its own connection")
      ->check(CLI::Range(1, 256));
  app.add_option("--seconds", seconds, "length of each run")->check(CLI::Range(0.1, 600.0));
  app.add_option("--wanted-samples", wanted_samples, "samples asked for per GetSplit");
  app.add_option("--modes", modes, "runs to do: split, split+ack")
      ->check(CLI::IsMember({"split", "split+ack"}));
  CLI11_PARSE(app, argc, argv);

  int run = 0;
  for (const std::string& mode : modes) {
    for (bool journal : {false, true}) {
      std::string dir;
      if (journal) {
        dir = stoker::StrCat(work_dir, "/journal-", run++);
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
      if (!RunOnce(mode, dir, clients, seconds, wanted_samples)) return 1;
    }
  }
  return 0;
}
