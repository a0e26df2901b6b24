// stoker dispatcher / worker / consume / demo: the disaggregated service from the shell
// (docs/protocol.md).
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "stoker/cli/commands.h"
#include "stoker/cli/progress.h"
#include "stoker/core/log_setup.h"
#include "stoker/core/metrics.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/image.h"
#include "stoker/format/convert.h"
#include "stoker/service/client/client.h"
#include "stoker/service/client/client_metrics.h"
#include "stoker/service/common/health_server.h"
#include "stoker/service/common/net_util.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"

namespace stoker::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Blocks SIGINT/SIGTERM in every thread started afterwards, so WaitForSignal receives them.
void BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}
void WaitForSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
}

struct DispatcherCliOptions {
  int port = 5000;
  int http_port = 0;
  std::string work_dir;
  int worker_timeout_ms = 3000;
  int client_timeout_ms = 30000;
  int64_t max_jobs = 1000;
  int64_t max_clients = 10000;
  int64_t max_registered_workers = 1000;
  std::string log_format = "text";
  std::string autoscale = "off";  // off, local or kubernetes
  int min_workers = 1;
  int max_workers = 8;
  int autoscale_interval_ms = 2000;
  std::vector<std::string> worker_flags;  // local: more `stoker worker` flags
  std::string k8s_deployment;
  std::string k8s_namespace;
  service::SecurityOptions security;
};

absl::Status RunDispatcher(const DispatcherCliOptions& o) {
  RETURN_IF_ERROR(SetLogFormat(o.log_format));
  SetDefaultLogLevel(spdlog::level::info);  // its events, one line each (docs/operations.md)
  BlockStopSignals();
  service::DispatcherOptions options;
  options.port = o.port;
  options.work_dir = o.work_dir;
  options.worker_timeout = std::chrono::milliseconds(o.worker_timeout_ms);
  options.client_timeout = std::chrono::milliseconds(o.client_timeout_ms);
  options.load_interval = std::chrono::milliseconds(o.autoscale_interval_ms);
  options.autoscaler.min_workers = o.min_workers;
  options.autoscaler.max_workers = o.max_workers;
  if (o.min_workers > o.max_workers)
    return absl::InvalidArgumentError(
        StrCat("--min-workers ", o.min_workers, " is more than --max-workers ", o.max_workers));
  std::unique_ptr<service::WorkerActuator> actuator;
  if (o.autoscale == "kubernetes") {
    service::KubernetesActuatorOptions k;
    k.deployment = o.k8s_deployment;
    k.ns = o.k8s_namespace;
    ASSIGN_OR_RETURN(actuator, service::KubernetesWorkerActuator::Create(k));
  } else if (!o.k8s_deployment.empty() || !o.k8s_namespace.empty()) {
    return absl::InvalidArgumentError(
        "--k8s-deployment and --k8s-namespace need --autoscale kubernetes");
  }
  options.security = o.security;
  options.max_jobs = o.max_jobs;
  options.max_clients = o.max_clients;
  options.max_registered_workers = o.max_registered_workers;
  ASSIGN_OR_RETURN(auto health, service::HealthServer::Start(o.http_port));
  ASSIGN_OR_RETURN(auto dispatcher, service::Dispatcher::Start(options));
  if (o.autoscale == "local") {
    service::LocalActuatorOptions l;
    l.dispatcher_address = StrCat("127.0.0.1:", dispatcher->port());
    l.worker_flags = o.worker_flags;
    actuator = std::make_unique<service::LocalWorkerActuator>(l);
  }
  if (actuator) dispatcher->StartAutoscaler(std::move(actuator));
  health->Handle("/", [d = dispatcher.get()](const std::string&) {
    return service::HttpReply{200, "text/html; charset=utf-8", d->StatusPage()};
  });
  std::printf(
      "dispatcher: serving on port %d, /healthz on port %d, journal in %s (%lld updates "
      "replayed)\n",
      dispatcher->port(), health->port(), o.work_dir.empty() ? "(none)" : o.work_dir.c_str(),
      static_cast<long long>(dispatcher->updates_applied()));
  std::fflush(stdout);
  WaitForSignal();
  health.reset();  // before the dispatcher its status page reads
  return absl::OkStatus();
}

struct WorkerCliOptions {
  std::string dispatcher;
  int port = 0;
  int http_port = 0;
  std::string host;  // empty: the address this host reaches the dispatcher from
  int heartbeat_ms = 500;
  std::string buffer_bytes = "256MiB";
  std::string cache_bytes = "256MiB";
  int threads = 0;
  int drain_timeout_ms = 10000;
  int unhealthy_after = 3;
  std::vector<std::string> plugin_dirs;
  int max_clients_per_job = 1024;
  std::string log_format = "text";
  service::SecurityOptions security;
};

absl::Status RunWorker(const WorkerCliOptions& o) {
  RETURN_IF_ERROR(SetLogFormat(o.log_format));
  SetDefaultLogLevel(spdlog::level::info);
  BlockStopSignals();
  KeepDataPathAllocationsOnHeap();
  // One malloc arena per core instead of glibc's 8 per core: every job's pipeline threads would
  // otherwise spread buffers over many arenas, and the memory of ended jobs, freed but scattered,
  // would stay resident (measured: 20 abandoned jobs left a worker at 2.2x its RSS, 1.1x with
  // this).
  mallopt(M_ARENA_MAX, static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));
  service::WorkerOptions options;
  options.dispatcher_address = o.dispatcher;
  options.port = o.port;
  options.host = o.host;
  if (options.host.empty()) {
    auto local = service::LocalAddressTowards(o.dispatcher);
    if (!local.ok()) {
      return absl::InvalidArgumentError(
          StrCat("cannot find the address clients reach this worker at (", local.status().message(),
                 "); give it with --host"));
    }
    options.host = *local;
  }
  options.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
  ASSIGN_OR_RETURN(uint64_t buffer_bytes, ParseByteSizeFlag("--buffer-bytes", o.buffer_bytes));
  if (buffer_bytes > uint64_t{INT64_MAX}) {
    return absl::InvalidArgumentError(StrCat("--buffer-bytes: ", o.buffer_bytes, " is too large"));
  }
  options.buffer_bytes = static_cast<int64_t>(buffer_bytes);
  ASSIGN_OR_RETURN(uint64_t cache_bytes, ParseByteSizeFlag("--cache-bytes", o.cache_bytes));
  if (cache_bytes > uint64_t{INT64_MAX}) {
    return absl::InvalidArgumentError(StrCat("--cache-bytes: ", o.cache_bytes, " is too large"));
  }
  options.cache_bytes = static_cast<int64_t>(cache_bytes);
  options.threads = o.threads;
  options.plugin_dirs = o.plugin_dirs;
  options.unhealthy_after_failures = o.unhealthy_after;
  options.security = o.security;
  options.max_clients_per_job = o.max_clients_per_job;
  ASSIGN_OR_RETURN(auto health, service::HealthServer::Start(o.http_port));
  ASSIGN_OR_RETURN(auto worker, service::Worker::Start(options));
  // 503 with the reason once the worker is unhealthy (docs/operations.md).
  health->Handle("/healthz", [w = worker.get()](const std::string&) {
    std::string reason = w->unhealthy_reason();
    if (reason.empty()) return service::HttpReply{200, "text/plain", "ok\n"};
    return service::HttpReply{503, "text/plain", StrCat("unhealthy: ", reason, "\n")};
  });
  struct ResetHealth {  // the handler must not outlive the worker
    service::HealthServer* h;
    ~ResetHealth() {
      h->Handle("/healthz", [](const std::string&) {
        return service::HttpReply{503, "text/plain", "stopping\n"};
      });
    }
  } reset_health{health.get()};
  std::printf("worker: serving on %s, /healthz on port %d, dispatcher %s\n",
              worker->address().c_str(), health->port(), o.dispatcher.c_str());
  std::fflush(stdout);
  WaitForSignal();
  // SIGTERM/SIGINT: a graceful stop (scale-down). SIGKILL is covered by the leases.
  std::fprintf(stderr, "worker: draining (at most %d ms), then leaving\n", o.drain_timeout_ms);
  worker->Drain(std::chrono::milliseconds(o.drain_timeout_ms));
  return absl::OkStatus();
}

struct ConsumeOptions {
  std::string dispatcher;
  std::string spec;
  std::string job_name;
  std::string sharding = "dynamic";
  std::string compression = "none";
  int requests_per_worker = 2;
  int64_t epochs = 1;
  int64_t first_epoch = 0;
  int64_t num_consumers = 0;
  int64_t consumer_index = 0;
  std::string partial_round = "drop";
  bool cross_trainer_cache = false;
  std::string trainer_id;
  std::string on_fall_behind = "recompute";
  bool deterministic = false;     // --deterministic
  bool no_deterministic = false;  // --no-deterministic
  int64_t prefetch_mb = 256;
  int64_t reorder_mb = 256;
  double no_worker_timeout_s = 0;
  int64_t max_elements = -1;
  bool print_keys = false;
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
  options.security = o.security;
  options.job_name = o.job_name;
  options.sharding = o.sharding;
  options.compression = o.compression;
  options.requests_per_worker = o.requests_per_worker;
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
    if (o.step_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.step_ms));
    if (o.checkpoint_every > 0 && elements % o.checkpoint_every == 0) {
      status = checkpoint();
      if (!status.ok()) break;
    }
  }
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
               "waited %.2f s for data, computed %.2f s (stall ratio %.3f)\n",
               static_cast<long long>(elements), static_cast<long long>(samples), stats.bytes / 1e6,
               static_cast<long long>(client->job_id()), seconds, elements / seconds,
               stats.bytes / 1e6 / seconds, static_cast<long long>(stats.duplicates),
               first_seconds * 1e3, stats.wait_seconds, stats.between_seconds,
               stats.wait_seconds + stats.between_seconds > 0
                   ? stats.wait_seconds / (stats.wait_seconds + stats.between_seconds)
                   : 0.0);
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

// ---- stoker demo ----

struct DemoOptions {
  int images = 2400;
  int batch = 8;
  std::string dir;
};

absl::Status MakeJpegs(const std::string& root, int count) {
  std::mt19937 rng(7);
  const char* classes[] = {"cat", "dog", "fox", "owl"};
  for (const char* c : classes) std::filesystem::create_directories(root + "/" + c);
  for (int i = 0; i < count; ++i) {
    int h = 96 + static_cast<int>(rng() % 64), w = 96 + static_cast<int>(rng() % 64);
    data::Tensor image;
    image.dtype = data::DType::kUint8;
    image.shape = {h, w, 3};
    MutableBuffer pixels(static_cast<size_t>(h) * w * 3);
    uint8_t base = static_cast<uint8_t>(rng());
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < 3; ++ch)
          pixels.data()[(y * w + x) * 3 + ch] = static_cast<uint8_t>(base + x * (ch + 1) + y * 2);
    image.data = std::move(pixels).Finish();
    ASSIGN_OR_RETURN(Buffer jpeg, data::EncodeJpeg(image, 85));
    std::string path = StrCat(root, "/", classes[i % 4], "/img", i, ".jpg");
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(jpeg.data()),
              static_cast<std::streamsize>(jpeg.size()));
    if (!out) return absl::InternalError(StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

void DrawProgress(int64_t done, int64_t total, double seconds) {
  const int width = 40;
  int filled = total > 0 ? static_cast<int>(width * done / total) : 0;
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  std::fprintf(stderr, "\r  [%s] %lld/%lld batches  %.0f batches/s", bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total),
               seconds > 0 ? done / seconds : 0.0);
  std::fflush(stderr);
}

absl::Status RunDemo(const DemoOptions& o) {
  KeepDataPathAllocationsOnHeap();
  std::string dir = o.dir;
  bool remove_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/stoker-demo-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("cannot create a temporary folder");
    dir = tmpl;
    remove_dir = true;
  }
  struct Cleanup {
    std::string dir;
    bool on;
    ~Cleanup() {
      std::error_code ec;
      if (on) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir, remove_dir};

  auto t0 = Clock::now();
  std::fprintf(stderr, "stoker demo: the disaggregated service on this machine, in %s\n",
               dir.c_str());
  std::fprintf(stderr, "1. generating %d JPEG images (4 classes) ...\n", o.images);
  RETURN_IF_ERROR(MakeJpegs(dir + "/images", o.images));
  std::fprintf(stderr, "2. converting them to shards with the format layer ...\n");
  format::ConvertOptions convert_options;
  convert_options.shard_bytes = 4 << 20;
  ASSIGN_OR_RETURN(auto summary,
                   format::Convert(dir + "/images", dir + "/shards", convert_options));
  std::fprintf(stderr, "   %zu files -> %s\n", summary.inputs, summary.manifest_url.c_str());

  std::fprintf(stderr,
               "3. starting a dispatcher and 2 workers (in this process, on loopback) ...\n");
  service::DispatcherOptions dopts;
  dopts.work_dir = dir + "/dispatcher";
  ASSIGN_OR_RETURN(auto dispatcher, service::Dispatcher::Start(dopts));
  std::string address = StrCat("127.0.0.1:", dispatcher->port());
  std::vector<std::unique_ptr<service::Worker>> workers;
  for (int i = 0; i < 2; ++i) {
    service::WorkerOptions wopts;
    wopts.dispatcher_address = address;
    wopts.heartbeat_interval = std::chrono::milliseconds(100);
    wopts.threads = 1;
    ASSIGN_OR_RETURN(auto w, service::Worker::Start(wopts));
    workers.push_back(std::move(w));
  }
  nlohmann::json spec = {{"source", {{"dataset", dir + "/shards"}}},
                         {"ops",
                          {{{"op", "shuffle"}, {"seed", 7}},
                           {{"op", "decode_image"}, {"field", "jpg"}},
                           {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", {64, 64}}},
                           {{"op", "flip"}, {"field", "jpg"}, {"p", 0.5}},
                           {{"op", "normalize"},
                            {"field", "jpg"},
                            {"mean", {0.485, 0.456, 0.406}},
                            {"std", {0.229, 0.224, 0.225}}},
                           {{"op", "batch"}, {"size", o.batch}}}}};
  std::fprintf(stderr,
               "4. consuming one epoch through the service (decode, crop 64x64, flip, "
               "normalize, batch %d):\n",
               o.batch);
  service::ServiceClientOptions copts;
  copts.dispatcher_address = address;
  copts.heartbeat_interval = std::chrono::milliseconds(100);
  auto start = Clock::now();
  ASSIGN_OR_RETURN(auto client, service::ServiceClient::Open(copts, spec.dump()));
  int64_t total_batches = (o.images + o.batch - 1) / o.batch;
  int64_t batches = 0, images = 0;
  std::set<std::string> keys;
  auto last_draw = Clock::now();
  while (true) {
    ASSIGN_OR_RETURN(std::optional<data::Element> e, client->GetNext());
    if (!e) break;
    ++batches;
    images += static_cast<int64_t>(e->keys.size());
    keys.insert(e->keys.begin(), e->keys.end());
    if (Clock::now() - last_draw > std::chrono::milliseconds(100)) {
      DrawProgress(batches, total_batches, Seconds(start));
      last_draw = Clock::now();
    }
  }
  double seconds = Seconds(start);
  DrawProgress(batches, total_batches, seconds);
  std::fprintf(stderr, "\n");
  auto stats = client->stats();
  std::printf(
      "stoker demo: %lld images in %lld batches through 1 dispatcher + 2 workers in %.2f s\n",
      static_cast<long long>(images), static_cast<long long>(batches), seconds);
  std::printf("  %.0f images/s, %.1f MB/s of ready tensors (float32 64x64x3)\n", images / seconds,
              stats.bytes / 1e6 / seconds);
  std::printf("  every image exactly once: %s (%zu distinct of %d); %lld splits acknowledged\n",
              keys.size() == static_cast<size_t>(o.images) && images == o.images ? "yes" : "NO",
              keys.size(), o.images, static_cast<long long>(stats.splits));
  std::printf("  total %.1f s including data generation and conversion\n", Seconds(t0));
  if (images != o.images || keys.size() != static_cast<size_t>(o.images))
    return absl::InternalError("the demo did not deliver every image exactly once");
  return absl::OkStatus();
}

// --log-format, and STOKER_LOG in --help.
void AddLogOptions(CLI::App* app, std::string* format, const char* default_level) {
  app->add_option("--log-format", *format,
                  "text (default) or json: one JSON object a line (time, level, thread, msg) for "
                  "log pipelines")
      ->check(CLI::IsMember({"text", "json"}));
  app->footer(
      StrCat("Logs go to stderr. STOKER_LOG=trace|debug|info|warn|error|off sets the level "
             "(default here: ",
             default_level, "). See docs/operations.md."));
}

// Which side of the service a command is: it serves, dials, or both (a worker).
enum SecuritySides { kServes = 1, kDials = 2 };

// TLS and token flags (docs/security.md), and their environment variables in --help's footer.
void AddSecurityOptions(CLI::App* app, service::SecurityOptions* o, int sides, bool worker) {
  const bool serves = (sides & kServes) != 0, dials = (sides & kDials) != 0;
  app->add_option("--tls-cert", o->tls_cert_file,
                  serves ? "PEM certificate chain to serve TLS with (with --tls-key)"
                         : "PEM client certificate, for servers that require one (mutual TLS)");
  app->add_option("--tls-key", o->tls_key_file, "PEM private key of --tls-cert");
  if (serves)
    app->add_option("--tls-client-ca", o->tls_client_ca_file,
                    "mutual TLS: accept only clients presenting a certificate signed by this PEM "
                    "CA");
  if (dials)
    app->add_option("--tls-ca", o->tls_ca_file,
                    "dial with TLS, verifying servers' certificates against this PEM CA "
                    "(default: $STOKER_TLS_CA; none: plaintext)")
        ->envname("STOKER_TLS_CA");
  app->add_option("--token-file", o->token_file,
                  serves ? "file holding the client token: required on every client RPC"
                           " (default: $STOKER_TOKEN_FILE; none: no token required)"
                         : "file holding the token presented on every RPC (default: "
                           "$STOKER_TOKEN_FILE)")
      ->envname("STOKER_TOKEN_FILE");
  if (serves && !worker)
    app->add_option("--worker-token-file", o->worker_token_file,
                    "file holding the token workers must present (default: $STOKER_WORKER_TOKEN_"
                    "FILE, else --token-file's)")
        ->envname("STOKER_WORKER_TOKEN_FILE");
  if (worker)
    app->add_option("--worker-token-file", o->worker_token_file,
                    "file holding the token presented to the dispatcher (default: "
                    "$STOKER_WORKER_TOKEN_FILE, else --token-file's)")
        ->envname("STOKER_WORKER_TOKEN_FILE");
  app->footer(StrCat(app->get_footer(), "\nSecurity: STOKER_TOKEN_FILE",
                     serves ? ", STOKER_WORKER_TOKEN_FILE" : "", dials ? ", STOKER_TLS_CA" : "",
                     " stand for the flags of the same name. Tokens and keys are never logged. "
                     "See docs/security.md."));
}

}  // namespace

void RegisterServiceCommands(CLI::App& app, absl::Status* result) {
  // Static, so the parsed options outlive parsing without a heap object the leak checker flags.
  static DispatcherCliOptions dispatcher_options;
  auto* d = app.add_subcommand("dispatcher", "Run the service's dispatcher");
  d->add_option("--port", dispatcher_options.port, "gRPC port (default 5000; 0: any free port)");
  d->add_option("--http-port", dispatcher_options.http_port,
                "port of GET /healthz and /metrics (0: any)");
  d->add_option("--work-dir", dispatcher_options.work_dir,
                "folder of the journal; a restart replays it (default: no journal)");
  d->add_option("--worker-timeout-ms", dispatcher_options.worker_timeout_ms,
                "a worker silent this long is lost and its splits leased again (default 3000)");
  d->add_option("--client-timeout-ms", dispatcher_options.client_timeout_ms,
                "a consumer silent this long is removed (its unfinished splits go to the others); "
                "a job without a live consumer this long is ended (default 30000)")
      ->check(CLI::PositiveNumber);
  d->add_option("--autoscale", dispatcher_options.autoscale,
                "off (default), local (start and stop `stoker worker` processes on this host) or "
                "kubernetes (set the replicas of the workers' Deployment); docs/operations.md, "
                "\"Autoscaler\"")
      ->check(CLI::IsMember({"off", "local", "kubernetes"}));
  d->add_option("--min-workers", dispatcher_options.min_workers,
                "autoscaler: never fewer workers (default 1)")
      ->check(CLI::NonNegativeNumber);
  d->add_option("--max-workers", dispatcher_options.max_workers,
                "autoscaler: never more workers (default 8)")
      ->check(CLI::PositiveNumber);
  d->add_option("--autoscale-interval-ms", dispatcher_options.autoscale_interval_ms,
                "the load is measured, and the autoscaler decides, once per interval (default "
                "2000)")
      ->check(CLI::Range(100, 600000));
  d->add_option("--worker-flag", dispatcher_options.worker_flags,
                "--autoscale local: one more argument for every `stoker worker` it starts "
                "(repeatable, e.g. --worker-flag=--threads --worker-flag=2)");
  d->add_option("--k8s-deployment", dispatcher_options.k8s_deployment,
                "--autoscale kubernetes: the workers' Deployment, scaled through its `scale` "
                "subresource with the pod's service account");
  d->add_option("--k8s-namespace", dispatcher_options.k8s_namespace,
                "--autoscale kubernetes: the Deployment's namespace (default: the pod's)");
  d->add_option("--max-jobs", dispatcher_options.max_jobs,
                "most running jobs; creating one more is refused (default 1000; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  d->add_option("--max-clients", dispatcher_options.max_clients,
                "most consumers over all jobs; one more is refused (default 10000; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  d->add_option("--max-registered-workers", dispatcher_options.max_registered_workers,
                "most registered workers; one more is refused (default 1000; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  AddLogOptions(d, &dispatcher_options.log_format, "info");
  AddSecurityOptions(d, &dispatcher_options.security, kServes, /*worker=*/false);
  d->callback([=] { *result = RunDispatcher(dispatcher_options); });

  static WorkerCliOptions worker_options;
  auto* w = app.add_subcommand("worker", "Run a service worker");
  w->add_option("--dispatcher", worker_options.dispatcher, "the dispatcher's HOST:PORT")
      ->required();
  w->add_option("--port", worker_options.port, "gRPC port (default 0: any free port)");
  w->add_option("--http-port", worker_options.http_port,
                "port of GET /healthz and /metrics (0: any)");
  w->add_option("--host", worker_options.host,
                "host name or address clients reach this worker at (default: this host's "
                "address on the route to the dispatcher, 127.0.0.1 only if the dispatcher is "
                "on loopback)");
  w->add_option("--heartbeat-ms", worker_options.heartbeat_ms, "heartbeat interval (default 500)");
  w->add_option("--buffer-bytes", worker_options.buffer_bytes,
                "ready elements kept per job, in bytes; K, M, G suffixes (default 256M)");
  w->add_option("--cache-bytes", worker_options.cache_bytes,
                "cross-trainer cache jobs: elements kept per job for trainers behind the fastest, "
                "in bytes; K, M, G suffixes (default 256M). A trainer behind this window gets "
                "what it missed recomputed (or skipped, with on_fall_behind skip)");
  w->add_option("--threads", worker_options.threads, "pipeline threads (default: the spec's)");
  w->add_option("--drain-timeout-ms", worker_options.drain_timeout_ms,
                "on SIGTERM/SIGINT: finish the current splits and wait this long for clients to "
                "receive them before leaving (default 10000)");
  w->add_option("--plugin-dir", worker_options.plugin_dirs,
                "a folder whose plugin libraries clients' specs may load (repeatable; default: "
                "none, so specs naming plugins are refused). A plugin runs as code in this "
                "worker: name only folders you control (docs/security.md)");
  w->add_option("--unhealthy-after", worker_options.unhealthy_after,
                "after this many tasks in a row failed (e.g. the data cannot be read), the worker "
                "is unhealthy: it takes no new task and /healthz answers 503 with the reason "
                "(default 3; 0: never)")
      ->check(CLI::NonNegativeNumber);
  w->add_option("--max-clients-per-job", worker_options.max_clients_per_job,
                "most consumers of one job this worker keeps a stream for; one more is refused "
                "(default 1024; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  AddLogOptions(w, &worker_options.log_format, "info");
  AddSecurityOptions(w, &worker_options.security, kServes | kDials, /*worker=*/true);
  w->callback([=] { *result = RunWorker(worker_options); });

  static ConsumeOptions consume_options;
  auto* c = app.add_subcommand("consume", "Read a pipeline's elements through the service");
  c->add_option("--dispatcher", consume_options.dispatcher,
                "the dispatcher's HOST:PORT (or grpc://HOST:PORT)")
      ->required();
  c->add_option("SPEC", consume_options.spec, "pipeline spec (JSON file)")->required();
  c->add_option("--job-name", consume_options.job_name, "share the job by name (default: new job)");
  c->add_option("--sharding", consume_options.sharding,
                "dynamic (each sample once, split by split) or off (every worker runs it all)")
      ->check(CLI::IsMember({"dynamic", "off"}));
  c->add_option("--compression", consume_options.compression,
                "compress element payloads on the wire: none (default), zstd or lz4; pays off "
                "when the network, not the workers' CPU, limits the job")
      ->check(CLI::IsMember({"none", "zstd", "lz4"}));
  c->add_option("--requests-per-worker", consume_options.requests_per_worker,
                "element requests in flight to each worker (default 2)")
      ->check(CLI::PositiveNumber);
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
  c->add_option("--partial-round", consume_options.partial_round,
                "coordinated reads: drop (default) or pad a split's incomplete round")
      ->check(CLI::IsMember({"drop", "pad"}));
  c->add_flag("--cross-trainer-cache", consume_options.cross_trainer_cache,
              "with --job-name and --trainer-id: every trainer of the job reads all of it, "
              "produced once (workers keep a window of recent elements for trainers behind)");
  c->add_option("--trainer-id", consume_options.trainer_id,
                "cross-trainer cache: this trainer's id, one per trainer of the job");
  c->add_option("--on-fall-behind", consume_options.on_fall_behind,
                "cross-trainer cache: recompute (default: a trainer behind the window gets what "
                "it missed computed again) or skip (it is skipped and counted)")
      ->check(CLI::IsMember({"recompute", "skip"}));
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

  static DemoOptions demo_options;
  auto* m = app.add_subcommand(
      "demo", "Generate JPEGs, convert them to shards and consume them through a local service");
  m->add_option("--images", demo_options.images, "images to generate (default 2400)");
  m->add_option("--batch", demo_options.batch, "batch size (default 8)");
  m->add_option("--dir", demo_options.dir,
                "keep the data in this folder (default: a temporary one)");
  m->callback([=] { *result = RunDemo(demo_options); });
}

}  // namespace stoker::cli
