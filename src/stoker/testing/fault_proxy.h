// FaultProxy: an HTTP/1.1 forwarding proxy for tests that injects faults by rule, in front of one
// upstream server (the Swift S3 server or nginx). Clients talk to endpoint() instead of the
// upstream; both sides use keep-alive. Test-only: plain blocking POSIX sockets, one thread per
// client connection (started through stoker::StartThread).
//
//   auto proxy = FaultProxy::Start({.upstream_port = s3.port()});
//   (*proxy)->AddRule({.method = "GET", .path_substring = "/bucket/key", .count = 2,
//                      .fault = FaultKind::kSlowDown503});
//   // the next two matching GETs get 503 SlowDown; later ones pass through.
//
// Faults (a rule's `fault`):
//   kSlowDown503     respond 503 with an S3 <Error><Code>SlowDown</Code>...</Error> body (the
//                    upstream never sees the request)
//   kInternalError500  respond 500 with an S3 InternalError body
//   kResetAfterBytes forward; relay the response head and `after_bytes` bytes of the body as sent
//                    on the wire, then reset the connection (RST)
//   kTruncateBody    forward; relay the head (its full Content-Length) and `after_bytes` bytes of
//                    the body, then close the connection normally (FIN): a short body
//   kStall           wait `stall` before forwarding the request, then behave normally
// Independently of rules, set_latency(L) delays every response head by L.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace stoker::testing {

enum class FaultKind { kSlowDown503, kInternalError500, kResetAfterBytes, kTruncateBody, kStall };

// Returns "SlowDown503", "InternalError500", ... for messages.
const char* FaultKindName(FaultKind kind);

struct FaultRule {
  // A request matches when its method equals `method` (empty: any) and its request target (path
  // and query, as sent) contains `path_substring` (empty: any).
  std::string method;
  std::string path_substring;
  // Which matches fire: with count > 0, the next `count` matching requests (then the rule is
  // spent); with count == 0, each matching request with `probability` (from the proxy's seeded
  // generator, so a run is repeatable for one sequence of requests).
  int count = 0;
  double probability = 0;
  FaultKind fault = FaultKind::kSlowDown503;
  // kResetAfterBytes, kTruncateBody: body bytes relayed before the connection ends.
  int64_t after_bytes = 0;
  // kStall: how long to hold the request.
  absl::Duration stall = absl::ZeroDuration();
};

// Thread safety: every public method is thread-safe; rules and latency can change while requests
// are in flight (a request uses the rules as they are when its head arrives).
class FaultProxy {
 public:
  struct Options {
    std::string upstream_host = "127.0.0.1";  // a numeric IPv4 address
    int upstream_port = 0;
    int port = 0;  // 0: pick a free port
    absl::Duration latency = absl::ZeroDuration();
    uint64_t seed = 1;  // for probability rules
  };

  // Listens on 127.0.0.1:options.port and serves until destroyed.
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const Options& options);

  // Stops accepting, closes every connection, wakes stalled requests and joins all threads.
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  // "http://127.0.0.1:PORT"
  std::string endpoint() const;

  // Rules are tried in the order added; the first that fires decides the request's fault.
  void AddRule(const FaultRule& rule);
  void ClearRules();
  void set_latency(absl::Duration latency);

  // Requests whose head the proxy has read (whether faulted or forwarded).
  int64_t requests_seen() const;
  // Faults injected, in total and of one kind.
  int64_t faults_injected() const;
  int64_t faults_injected(FaultKind kind) const;

 private:
  FaultProxy(const Options& options, int listen_fd, int port);

  void AcceptLoop();
  void ServeConnection(int client_fd, uint64_t id);
  // Picks the fault for one request (or nullopt) and counts it. Locks mu_.
  std::optional<FaultRule> ChooseFault(std::string_view method, std::string_view target);
  // Waits `duration` or until the proxy stops; false when stopping.
  bool Sleep(absl::Duration duration);
  int ConnectUpstream();
  void JoinFinishedThreads();

  const Options options_;
  const int listen_fd_;
  const int port_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<FaultRule> rules_ ABSL_GUARDED_BY(mu_);
  absl::Duration latency_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  int64_t requests_seen_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<FaultKind, int64_t> faults_ ABSL_GUARDED_BY(mu_);
  // Open sockets (client and upstream) by connection id, shut down on stop to unblock threads.
  std::map<uint64_t, std::vector<int>> open_fds_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);

  std::thread accept_thread_;
};

}  // namespace stoker::testing
