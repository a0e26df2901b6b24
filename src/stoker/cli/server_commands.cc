// stoker dispatcher and stoker worker: the service's two servers from the shell (docs/protocol.md,
// docs/operations.md). Each runs until SIGINT/SIGTERM, with /healthz and /metrics on its HTTP
// port; the dispatcher optionally with an autoscaler (local processes or a Kubernetes
// Deployment), the worker draining its splits before it leaves.
#include <malloc.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stoker/cli/commands.h"
#include "stoker/cli/service_cli.h"
#include "stoker/core/log_setup.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/service/common/health_server.h"
#include "stoker/service/common/net_util.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"

namespace stoker::cli {
namespace {

struct DispatcherCliOptions {
  std::string bind = "0.0.0.0";
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
  int standby_workers = 2;                // local: started, not registered, woken by a scale-up
  std::string k8s_deployment;
  std::string k8s_namespace;
  service::SecurityOptions security;
};

absl::Status RunDispatcher(const DispatcherCliOptions& o) {
  RETURN_IF_ERROR(SetLogFormat(o.log_format));
  SetDefaultLogLevel(spdlog::level::info);  // its events, one line each (docs/operations.md)
  BlockStopSignals();
  service::DispatcherOptions options;
  ASSIGN_OR_RETURN(options.bind_address, service::ParseBindAddress(o.bind));
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
  ASSIGN_OR_RETURN(auto health, service::HealthServer::Start(o.http_port, options.bind_address));
  ASSIGN_OR_RETURN(auto dispatcher, service::Dispatcher::Start(options));
  if (o.autoscale == "local") {
    service::LocalActuatorOptions l;
    // Its workers dial the dispatcher where it listens (loopback when it listens everywhere).
    l.dispatcher_address = service::IsWildcardAddress(options.bind_address)
                               ? StrCat("127.0.0.1:", dispatcher->port())
                               : service::ListenAddress(options.bind_address, dispatcher->port());
    l.worker_flags = o.worker_flags;
    // More standby workers than the workers the autoscaler may add would never be woken.
    l.standby = std::min(o.standby_workers, o.max_workers - o.min_workers);
    actuator = std::make_unique<service::LocalWorkerActuator>(l);
  }
  if (actuator) dispatcher->StartAutoscaler(std::move(actuator));
  health->Handle("/", [d = dispatcher.get()](const std::string&) {
    return service::HttpReply{200, "text/html; charset=utf-8", d->StatusPage()};
  });
  std::printf(
      "dispatcher: serving on port %d, /healthz on port %d, journal in %s (%lld updates "
      "replayed)%s\n",
      dispatcher->port(), health->port(), o.work_dir.empty() ? "(none)" : o.work_dir.c_str(),
      static_cast<long long>(dispatcher->updates_applied()),
      service::IsWildcardAddress(options.bind_address)
          ? ""
          : StrCat(", listening on ", options.bind_address, " only").c_str());
  std::fflush(stdout);
  WaitForSignal();
  health.reset();  // before the dispatcher its status page reads
  return absl::OkStatus();
}

struct WorkerCliOptions {
  std::string dispatcher;
  std::string bind = "0.0.0.0";
  int port = 0;
  int http_port = 0;
  std::string host;  // empty: the address this host reaches the dispatcher from
  int heartbeat_ms = 500;
  std::string buffer_bytes = "256MiB";
  std::string cache_bytes = "256MiB";
  std::string shm_bytes = "256MiB";
  int threads = 0;
  int drain_timeout_ms = 10000;
  int unhealthy_after = 3;
  std::vector<std::string> plugin_dirs;
  int max_clients_per_job = 1024;
  std::string log_format = "text";
  service::SecurityOptions security;
  int standby_fd = -1;
};

// A standby worker's wait for its go (--standby-fd, the local autoscaler's): one byte on `fd`
// (OK), its end of file or a pending stop signal (Cancelled: not needed), or an error naming the
// descriptor. Closes `fd`. Polls, so that SIGTERM or SIGINT (blocked) ends the wait within 0.1 s.
absl::Status AwaitStandbyGo(int fd) {
  absl::Status status = absl::CancelledError("standby worker: not needed (end of its socket)");
  while (true) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, /*timeout_ms=*/100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0 && (p.revents & POLLNVAL) == 0) {
      char go = 0;
      ssize_t n = ::read(fd, &go, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n == 1) status = absl::OkStatus();
      if (n < 0) status = absl::ErrnoToStatus(errno, StrCat("--standby-fd ", fd, ": cannot read"));
      break;
    }
    if (ready != 0) {
      status = absl::FailedPreconditionError(
          StrCat("--standby-fd ", fd, ": not an open descriptor (the local autoscaler passes it)"));
      break;
    }
    if (StopSignalPending()) {
      status = absl::CancelledError("standby worker: stopped by a signal before it was needed");
      break;
    }
  }
  ::close(fd);
  return status;
}

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
  ASSIGN_OR_RETURN(options.bind_address, service::ParseBindAddress(o.bind));
  options.port = o.port;
  options.host = o.host;
  // Listening on one address: that is where consumers reach it.
  if (options.host.empty() && !service::IsWildcardAddress(options.bind_address))
    options.host = options.bind_address.find(':') != std::string::npos
                       ? StrCat("[", options.bind_address, "]")
                       : options.bind_address;
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
  uint64_t shm_bytes = 0;  // 0: off
  if (o.shm_bytes != "0") {
    ASSIGN_OR_RETURN(shm_bytes, ParseByteSizeFlag("--shm-bytes", o.shm_bytes));
  }
  if (shm_bytes > uint64_t{INT64_MAX}) {
    return absl::InvalidArgumentError(StrCat("--shm-bytes: ", o.shm_bytes, " is too large"));
  }
  options.shm_bytes = static_cast<int64_t>(shm_bytes);
  options.threads = o.threads;
  options.plugin_dirs = o.plugin_dirs;
  options.unhealthy_after_failures = o.unhealthy_after;
  options.security = o.security;
  options.max_clients_per_job = o.max_clients_per_job;
  ASSIGN_OR_RETURN(auto health, service::HealthServer::Start(o.http_port, options.bind_address));
  if (o.standby_fd >= 0)
    options.before_register = [fd = o.standby_fd] { return AwaitStandbyGo(fd); };
  absl::StatusOr<std::unique_ptr<service::Worker>> started = service::Worker::Start(options);
  // A standby that was not needed (its dispatcher closed the socket, or SIGTERM) ends quietly.
  if (o.standby_fd >= 0 && absl::IsCancelled(started.status())) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto worker, std::move(started));
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

}  // namespace

void RegisterServerCommands(CLI::App& app, absl::Status* result) {
  // Static, so the parsed options outlive parsing without a heap object the leak checker flags.
  static DispatcherCliOptions dispatcher_options;
  auto* d = app.add_subcommand("dispatcher", "Run the service's dispatcher");
  d->add_option("--bind", dispatcher_options.bind,
                "ADDRESS the gRPC and HTTP ports listen on: 0.0.0.0 (default: every interface), "
                "127.0.0.1 (this host only) or one interface's address");
  d->add_option("--port", dispatcher_options.port, "gRPC port (default 5000; 0: any free port)");
  d->add_option("--http-port", dispatcher_options.http_port,
                "port of GET / (status page), /healthz and /metrics (0: any)");
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
  d->add_option("--standby-workers", dispatcher_options.standby_workers,
                "--autoscale local: worker processes kept started but not registered; a "
                "scale-up wakes one instead of starting a process, saving its start-up "
                "(default 2; 0: none); docs/operations.md, \"Autoscaler\"")
      ->check(CLI::NonNegativeNumber);
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
  w->add_option("--bind", worker_options.bind,
                "ADDRESS the gRPC and HTTP ports listen on: 0.0.0.0 (default: every interface), "
                "127.0.0.1 (this host only) or one interface's address");
  w->add_option("--port", worker_options.port, "gRPC port (default 0: any free port)");
  w->add_option("--http-port", worker_options.http_port,
                "port of GET /healthz and /metrics (0: any)");
  w->add_option("--host", worker_options.host,
                "host name or address clients reach this worker at (default: the --bind address "
                "if it is one address, else this host's address on the route to the dispatcher, "
                "127.0.0.1 only if the dispatcher is on loopback)");
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
  // The local autoscaler's standby workers (LocalActuatorOptions::standby); not for users.
  w->add_option("--standby-fd", worker_options.standby_fd,
                "internal: serve, then register only once a byte is read from this descriptor; "
                "exit at its end of file")
      ->group("");
  w->add_option("--unhealthy-after", worker_options.unhealthy_after,
                "after this many tasks in a row failed (e.g. the data cannot be read), the worker "
                "is unhealthy: it takes no new task and /healthz answers 503 with the reason "
                "(default 3; 0: never)")
      ->check(CLI::NonNegativeNumber);
  w->add_option("--shm-bytes", worker_options.shm_bytes,
                "shared memory per consumer on this host: payloads go through a segment of this "
                "size instead of the socket (default 256MiB; 0: off, every payload in the reply); "
                "a cross-trainer job's trainers share one segment of this size plus "
                "--cache-bytes");
  w->add_option("--max-clients-per-job", worker_options.max_clients_per_job,
                "most consumers of one job this worker keeps a stream for; one more is refused "
                "(default 1024; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  AddLogOptions(w, &worker_options.log_format, "info");
  AddSecurityOptions(w, &worker_options.security, kServes | kDials, /*worker=*/true);
  w->callback([=] { *result = RunWorker(worker_options); });
}

}  // namespace stoker::cli
