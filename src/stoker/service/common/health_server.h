// A minimal HTTP server for operators: GET /healthz answers "ok" (so that probes - Kubernetes,
// scripts, tests - can see that a dispatcher, worker or client process is alive), GET /metrics the
// process's MetricsRegistry::Default() in the Prometheus text format, and a process may add pages
// (Handle). Every other path: 404. One thread serves everything; a handler must be quick.
//
// Thread safety: Start and the destructor from one thread; port() and Handle are thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace stoker::service {

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};
// Builds the reply to a GET of one path (the query string, if any, is passed in `query`).
using HttpHandler = std::function<HttpReply(const std::string& query)>;

class HealthServer {
 public:
  // Listens on bind:port (bind: a numeric IPv4 or IPv6 address, net_util.h's ParseBindAddress;
  // port 0: any free port) and serves from one thread.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(int port,
                                                             const std::string& bind = "0.0.0.0");
  ~HealthServer();  // stops and joins the thread
  int port() const { return port_; }
  // Serves GET (and HEAD) `path` (e.g. "/healthz", "/") with `handler` from now on, replacing the
  // one it had.
  void Handle(const std::string& path, HttpHandler handler);

 private:
  HealthServer(int fd, int port);
  void Serve();
  void Answer(int fd, const std::string& request);
  absl::Mutex mu_;
  std::map<std::string, HttpHandler> handlers_ ABSL_GUARDED_BY(mu_);
  int fd_;
  int port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace stoker::service
