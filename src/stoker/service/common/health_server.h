// A minimal HTTP server answering GET /healthz with "ok" (every other path: 404), so that probes
// (Kubernetes, scripts, tests) can see that a dispatcher, worker or client process is alive.
//
// Thread safety: Start and the destructor from one thread; port() is thread-safe after Start.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"

namespace stoker::service {

class HealthServer {
 public:
  // Listens on 0.0.0.0:port (0: any free port) and serves from one thread.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(int port);
  ~HealthServer();  // stops and joins the thread
  int port() const { return port_; }

 private:
  HealthServer(int fd, int port);
  void Serve();
  int fd_;
  int port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace stoker::service
