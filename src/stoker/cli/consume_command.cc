// stoker consume: reads a pipeline's elements through the service as one consumer (a
// ServiceClient), optionally as a simulated trainer (--step-ms), printing keys, writing and
// resuming from a checkpoint file, serving /metrics, and stopping cleanly on SIGINT/SIGTERM
// (it leaves the job, so its unfinished splits go to the other consumers).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "stoker/cli/commands.h"
#include "stoker/cli/progress.h"
#include "stoker/cli/service_cli.h"
#include "stoker/core/log_setup.h"
#include "stoker/core/metrics.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/service/client/client.h"
#include "stoker/service/client/client_metrics.h"
#include "stoker/service/common/health_server.h"

namespace stoker::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ConsumeOptions {
  std::string dispatcher;
  std::string spec;
  std::string job_name;
  std::string display_name;           // empty: <user>@<host>:stoker consume
  double wait_for_dispatcher_s = -1;  // < 0: STOKER_WAIT_FOR_DISPATCHER, else 0
  service::Sharding sharding = service::Sharding::kDynamic;
  service::Compression compression = service::Compression::kNone;
  int requests_per_worker = 2;
  bool no_shm = false;  // payloads in the reply even from a worker on this host
  int64_t epochs = 1;
  int64_t first_epoch = 0;
  int64_t num_consumers = 0;
  int64_t consumer_index = 0;
  service::PartialRound partial_round = service::PartialRound::kDrop;
  bool cross_trainer_cache = false;
  std::string trainer_id;
  service::OnFallBehind on_fall_behind = service::OnFallBehind::kRecompute;
  bool deterministic = false;     // --deterministic
  bool no_deterministic = false;  // --no-deterministic
  int64_t prefetch_mb = 256;
  int64_t reorder_mb = 256;
  double no_worker_timeout_s = 0;
  int64_t max_elements = -1;
  bool print_keys = false;
  bool digest = false;           // print a SHA-256 of everything delivered
  std::string checkpoint;        // resume from this file if it exists; write the token there
  int64_t checkpoint_every = 0;  // elements between writes (0: only when interrupted or done)
  int http_port = -1;
  int heartbeat_ms = 200;
  int linger_ms = 0;
  double step_ms = 0;  // a simulated trainer's work per element
  std::string log_format = "text";
  ProgressMode progress = ProgressMode::kAuto;
  service::SecurityOptions security;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read spec file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `token` to `path` atomically (a temporary file renamed over it, after fsync), so that a
// consumer killed at any moment leaves the previous token or the new one, never a torn file.
absl::Status WriteCheckpoint(const std::string& path, const std::string& token) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::UnavailableError(StrCat("cannot write checkpoint ", tmp));
  bool ok = std::fwrite(token.data(), 1, token.size(), f) == token.size() &&
            std::fputc('\n', f) != EOF && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    return absl::UnavailableError(StrCat("cannot write checkpoint ", path, " (disk full?)"));
  return absl::OkStatus();
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status RunConsume(const ConsumeOptions& o) {
  RETURN_IF_ERROR(SetLogFormat(o.log_format));
  ASSIGN_OR_RETURN(std::string spec, ReadFile(o.spec));
  KeepDataPathAllocationsOnHeap();
  // SIGINT/SIGTERM go to a thread of their own that cancels the client: the consumer stops at
  // once, says so and leaves the job (its unfinished splits go to other consumers).
  BlockStopSignals();
  {
    sigset_t wake;
    sigemptyset(&wake);
    sigaddset(&wake, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &wake, nullptr);
  }
  std::unique_ptr<service::HealthServer> health;
  if (o.http_port >= 0) {
    ASSIGN_OR_RETURN(health, service::HealthServer::Start(o.http_port));
  }
  service::ServiceClientOptions options;
  options.dispatcher_address = o.dispatcher;
  service::SetClientSecurity(&options, o.security);
  options.job_name = o.job_name;
  options.display_name =
      o.display_name.empty() ? service::DefaultDisplayName("stoker consume") : o.display_name;
  if (o.wait_for_dispatcher_s >= 0)
    options.wait_for_dispatcher =
        std::chrono::milliseconds(static_cast<int64_t>(o.wait_for_dispatcher_s * 1000));
  options.sharding = o.sharding;
  options.compression = o.compression;
  options.requests_per_worker = o.requests_per_worker;
  options.shared_memory = !o.no_shm;
  options.num_epochs = o.epochs;
  options.first_epoch = o.first_epoch;
  options.num_consumers = o.num_consumers;
  options.consumer_index = o.consumer_index;
  options.partial_round = o.partial_round;
  options.cross_trainer_cache = o.cross_trainer_cache;
  options.trainer_id = o.trainer_id;
  options.on_fall_behind = o.on_fall_behind;
  if (o.deterministic && o.no_deterministic)
    return absl::InvalidArgumentError("give --deterministic or --no-deterministic, not both");
  // In order by default; a named job without coordinated reads is meant to be shared, so it
  // delivers fastest first unless --deterministic says otherwise.
  // A cross-trainer cache job gives each trainer all of it: in order by default too.
  options.deterministic =
      o.deterministic ||
      (!o.no_deterministic && (o.job_name.empty() || o.num_consumers > 0 || o.cross_trainer_cache));
  options.prefetch_bytes = o.prefetch_mb << 20;
  options.reorder_bytes = o.reorder_mb << 20;
  options.no_worker_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(o.no_worker_timeout_s * 1000));
  options.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
  if (!o.checkpoint.empty() && std::filesystem::exists(o.checkpoint)) {
    ASSIGN_OR_RETURN(options.resume, ReadFile(o.checkpoint));
    std::fprintf(stderr, "consume: resuming from checkpoint %s\n", o.checkpoint.c_str());
  }
  auto start = Clock::now();
  // Open retries for up to its connect timeout: a signal meanwhile ends the process plainly.
  std::atomic<service::ServiceClient*> current{nullptr};
  std::atomic<bool> interrupted{false};
  std::thread signals([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);  // our own wake-up at the end
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGUSR1) return;
    interrupted = true;
    if (service::ServiceClient* c = current.load()) {
      c->Cancel();
    } else {
      std::fprintf(stderr, "consume: interrupted\n");
      std::_Exit(130);
    }
  });
  struct StopSignalThread {
    std::thread* t;
    ~StopSignalThread() {
      pthread_kill(t->native_handle(), SIGUSR1);
      t->join();
    }
  } stop_signals{&signals};
  auto opened = service::ServiceClient::Open(options, spec);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<service::ServiceClient> client = std::move(*opened);
  current = client.get();
  // The consumer's counters at /metrics (docs/operations.md), while the client lives.
  struct Collector {
    int64_t id;
    ~Collector() { MetricsRegistry::Default().RemoveCollector(id); }
  } collector{MetricsRegistry::Default().AddCollector(
      [c = client.get()](MetricsWriter& w) { service::WriteClientMetrics(*c, w); })};
  if (interrupted) client->Cancel();
  int64_t elements = 0, samples = 0, epoch_elements = 0;
  double first_seconds = 0;  // job start-up: until the first element arrived
  absl::Status status;
  // What was printed is on its way out before the token that says it was delivered.
  auto checkpoint = [&]() -> absl::Status {
    if (o.checkpoint.empty()) return absl::OkStatus();
    std::fflush(stdout);
    auto token = client->Checkpoint();
    if (absl::IsUnavailable(token.status())) return absl::OkStatus();  // nothing delivered yet
    if (!token.ok()) return token.status();
    return WriteCheckpoint(o.checkpoint, *token);
  };
  ElementDigest digest;
  Progress progress("consume", "elements", o.progress);
  if (o.max_elements >= 0) progress.SetTotals(0, o.max_elements);
  while (o.max_elements < 0 || elements < o.max_elements) {
    auto e = client->GetNext();
    if (!e.ok()) {
      status = e.status();
      break;
    }
    if (!*e) {
      std::fprintf(stderr, "epoch %lld: %lld elements\n", static_cast<long long>(client->epoch()),
                   static_cast<long long>(epoch_elements));
      epoch_elements = 0;
      if (!client->AdvanceEpoch()) break;
      continue;
    }
    if (elements == 0) first_seconds = Seconds(start);
    ++elements;
    ++epoch_elements;
    samples += static_cast<int64_t>((*e)->keys.size());
    progress.Add(static_cast<int64_t>((*e)->ByteSize()), 1);
    if (o.print_keys)
      for (const auto& k : (*e)->keys) std::fprintf(stdout, "%s\n", k.c_str());
    if (o.digest) digest.Add(**e);
    if (o.step_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.step_ms));
    if (o.checkpoint_every > 0 && elements % o.checkpoint_every == 0) {
      status = checkpoint();
      if (!status.ok()) break;
    }
  }
  if (o.digest && status.ok()) std::fprintf(stdout, "sha256 %s\n", digest.Hex().c_str());
  std::fflush(stdout);
  // Interrupted, at --max-elements or at the end: the token says what was delivered.
  if (absl::Status s = checkpoint(); !s.ok() && status.ok()) status = s;
  current = nullptr;
  progress.Finish();
  double seconds = Seconds(start);
  if (health && o.linger_ms > 0 && !interrupted) {
    std::this_thread::sleep_for(std::chrono::milliseconds(o.linger_ms));
  }
  auto stats = client->stats();
  std::fprintf(stderr,
               "consumed %lld elements (%lld samples, %.1f MB) of job %lld in %.2f s: %.0f "
               "elements/s, %.1f MB/s; %lld duplicates dropped; first element after %.0f ms; "
               "waited %.3f s for data, computed %.2f s (stall ratio %.4f)\n",
               static_cast<long long>(elements), static_cast<long long>(samples), stats.bytes / 1e6,
               static_cast<long long>(client->job_id()), seconds, elements / seconds,
               stats.bytes / 1e6 / seconds, static_cast<long long>(stats.duplicates),
               first_seconds * 1e3, stats.wait_seconds, stats.between_seconds,
               stats.wait_seconds + stats.between_seconds > 0
                   ? stats.wait_seconds / (stats.wait_seconds + stats.between_seconds)
                   : 0.0);
  if (stats.shm_elements > 0)
    std::fprintf(stderr, "shared memory: %lld elements (%.1f MB) from workers on this host\n",
                 static_cast<long long>(stats.shm_elements), stats.shm_bytes / 1e6);
  if (o.cross_trainer_cache)
    std::fprintf(stderr,
                 "cross-trainer cache (trainer %s): %lld elements from the workers' windows, %lld "
                 "recomputed, %lld skipped\n",
                 o.trainer_id.c_str(), static_cast<long long>(stats.cache_hits),
                 static_cast<long long>(stats.cache_recomputed),
                 static_cast<long long>(stats.cache_skipped));
  if (interrupted) {
    client.reset();  // leaves the job now
    std::fprintf(stderr, "consume: interrupted\n");
    std::fflush(nullptr);
    std::_Exit(130);
  }
  return status;
}

}  // namespace

void RegisterConsumeCommand(CLI::App& app, absl::Status* result) {
  // Static, so the parsed options outlive parsing without a heap object the leak checker flags.
  static ConsumeOptions consume_options;
  auto* c = app.add_subcommand("consume", "Read a pipeline's elements through the service");
  c->add_option("--dispatcher", consume_options.dispatcher,
                "the dispatcher's HOST:PORT (or grpc://HOST:PORT)")
      ->required();
  c->add_option("SPEC", consume_options.spec, "pipeline spec (JSON file)")->required();
  c->add_option("--job-name", consume_options.job_name, "share the job by name (default: new job)");
  c->add_option("--display-name", consume_options.display_name,
                "what operators see for the job on the status page and /metrics if it has no "
                "--job-name (default: USER@HOST:stoker consume)");
  c->add_option("--wait-for-dispatcher", consume_options.wait_for_dispatcher_s,
                "SECONDS to retry a refused connection, for a dispatcher that is still starting "
                "(default: $STOKER_WAIT_FOR_DISPATCHER, else 0: nothing listening at the address "
                "fails at once). Once the job is open, a restarting dispatcher is always waited "
                "for")
      ->check(CLI::NonNegativeNumber);
  AddModeOption(c, "--sharding", &consume_options.sharding,
                "dynamic (each sample once, split by split) or off (every worker runs it all)");
  AddModeOption(c, "--compression", &consume_options.compression,
                "compress element payloads on the wire: none (default), zstd or lz4; pays off "
                "when the network, not the workers' CPU, limits the job");
  c->add_option("--requests-per-worker", consume_options.requests_per_worker,
                "element requests in flight to each worker (default 2)")
      ->check(CLI::PositiveNumber);
  c->add_flag("--no-shm", consume_options.no_shm,
              "take every payload from the worker's reply, even from a worker on this host "
              "(default: such a worker hands payloads over through shared memory)");
  c->add_option("--epochs", consume_options.epochs,
                "epochs of the job, one after another, without a pause between them (default 1)")
      ->check(CLI::PositiveNumber);
  c->add_option("--first-epoch", consume_options.first_epoch,
                "the epoch the job starts at: its order and augmentation (default 0)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--num-consumers", consume_options.num_consumers,
                "coordinated reads: this many consumers (e.g. ranks) each get one batch per "
                "round and the same number per epoch (default 0: off)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--consumer-index", consume_options.consumer_index,
                "coordinated reads: which consumer this is, 0 .. N-1")
      ->check(CLI::NonNegativeNumber);
  AddModeOption(c, "--partial-round", &consume_options.partial_round,
                "coordinated reads: drop (default) or pad a split's incomplete round");
  c->add_flag("--cross-trainer-cache", consume_options.cross_trainer_cache,
              "with --job-name and --trainer-id: every trainer of the job reads all of it, "
              "produced once (workers keep a window of recent elements for trainers behind)");
  c->add_option("--trainer-id", consume_options.trainer_id,
                "cross-trainer cache: this trainer's id, one per trainer of the job");
  AddModeOption(c, "--on-fall-behind", &consume_options.on_fall_behind,
                "cross-trainer cache: recompute (default: a trainer behind the window gets what "
                "it missed computed again) or skip (it is skipped and counted)");
  c->add_flag("--deterministic", consume_options.deterministic,
              "deliver in the job's global order, the order of `stoker run` whatever the number "
              "of workers (the default, except for a --job-name without --num-consumers); one "
              "consumer");
  c->add_flag("--no-deterministic", consume_options.no_deterministic,
              "deliver elements as they arrive (fastest first); needed to share a job by name");
  c->add_option("--prefetch-mb", consume_options.prefetch_mb,
                "MiB of elements fetched ahead of the trainer (default 256)")
      ->check(CLI::PositiveNumber);
  c->add_option("--reorder-mb", consume_options.reorder_mb,
                "in order: MiB the client may hold beyond its prefetch buffer while the next "
                "element is missing (default 256)")
      ->check(CLI::PositiveNumber);
  c->add_option("--no-worker-timeout", consume_options.no_worker_timeout_s,
                "fail after this many seconds without any registered worker (default: wait, "
                "logging every 10 s)");
  c->add_option("--max-elements", consume_options.max_elements, "stop after this many elements");
  c->add_option("--step-ms", consume_options.step_ms,
                "simulate a trainer: spend this long on each element before asking for the next "
                "(for benchmarks and autoscaler tests; default 0)")
      ->check(CLI::NonNegativeNumber);
  c->add_flag("--print-keys", consume_options.print_keys,
              "print the key of every delivered sample, one a line, in delivery order");
  c->add_flag("--digest", consume_options.digest,
              "print the SHA-256 of every delivered element (keys, field names, dtypes, shapes "
              "and bytes, in delivery order), as `stoker run --digest` does");
  c->add_option("--checkpoint", consume_options.checkpoint,
                "resume from this checkpoint file if it exists, and write the consumer's position "
                "there when stopped (SIGINT/SIGTERM, --max-elements, the end) and every "
                "--checkpoint-every elements");
  c->add_option("--checkpoint-every", consume_options.checkpoint_every,
                "write the checkpoint every N elements (default 0: only when stopping)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--http-port", consume_options.http_port,
                "serve GET /healthz and /metrics on this port (0: any; default: none)");
  c->add_option("--heartbeat-ms", consume_options.heartbeat_ms, "heartbeat interval (default 200)");
  c->add_option("--linger-ms", consume_options.linger_ms,
                "with --http-port: keep serving /metrics this long after the last element, so "
                "that a scraper reads the final counts (default 0)")
      ->check(CLI::NonNegativeNumber);
  AddLogOptions(c, &consume_options.log_format, "warn");
  AddSecurityOptions(c, &consume_options.security, kDials, /*worker=*/false);
  AddProgressFlags(c, &consume_options.progress);
  c->callback([=] { *result = RunConsume(consume_options); });
}

}  // namespace stoker::cli
