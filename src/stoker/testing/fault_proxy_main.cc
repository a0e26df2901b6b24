// stoker-fault-proxy: the test FaultProxy as a standalone process, for benchmarks that want added
// latency (an object store "far away") and for the fault soak, which wants a rate of each fault
// (503 SlowDown, connections reset mid-body, truncated bodies, stalls) in front of a local server.
//
//   stoker-fault-proxy --upstream 127.0.0.1:8080 --port 0 --latency-ms 20 [--error-rate 0.01]
//       [--reset-rate R] [--truncate-rate R] [--stall-rate R --stall-ms 2000]
//
// Each rate is the probability that a request gets that fault (from one seeded generator).
//
// Prints "listening on http://127.0.0.1:PORT" on stdout once ready, then serves until SIGINT or
// SIGTERM.
#include <signal.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "stoker/core/strings.h"
#include "stoker/testing/fault_proxy.h"

int main(int argc, char** argv) {
  CLI::App app{"HTTP/1.1 forwarding proxy that adds latency and 503 SlowDown errors"};
  std::string upstream;
  int port = 0;
  int latency_ms = 0;
  double error_rate = 0;
  double reset_rate = 0;
  double truncate_rate = 0;
  double stall_rate = 0;
  int stall_ms = 2000;
  uint64_t seed = 1;
  app.add_option("--upstream", upstream, "HOST:PORT of the server to forward to")->required();
  app.add_option("--port", port, "port to listen on at 127.0.0.1 (0: a free one)");
  app.add_option("--latency-ms", latency_ms, "delay added to every response, in milliseconds");
  app.add_option("--error-rate", error_rate,
                 "probability that a request gets 503 SlowDown instead of being forwarded")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--reset-rate", reset_rate,
                 "probability that a response's connection is reset after 1,000 body bytes")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--truncate-rate", truncate_rate,
                 "probability that a response ends (connection closed) after 1,000 body bytes")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--stall-rate", stall_rate,
                 "probability that a request is held for --stall-ms before it is forwarded")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--stall-ms", stall_ms, "how long a stalled request is held, in milliseconds");
  app.add_option("--seed", seed, "seed of the fault rates");
  CLI11_PARSE(app, argc, argv);

  stoker::testing::FaultProxy::Options options;
  size_t colon = upstream.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(upstream.substr(colon + 1), &options.upstream_port)) {
    std::fprintf(stderr, "stoker-fault-proxy: --upstream must be HOST:PORT, got '%s'\n",
                 upstream.c_str());
    return 2;
  }
  options.upstream_host = upstream.substr(0, colon);
  if (options.upstream_host == "localhost") options.upstream_host = "127.0.0.1";
  options.port = port;
  options.latency = absl::Milliseconds(latency_ms);
  options.seed = seed;

  // Block the stop signals before any thread starts, then wait for one.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto proxy = stoker::testing::FaultProxy::Start(options);
  if (!proxy.ok()) {
    std::fprintf(stderr, "stoker-fault-proxy: %s\n", proxy.status().ToString().c_str());
    return 1;
  }
  using stoker::testing::FaultKind;
  if (error_rate > 0)
    (*proxy)->AddRule({.probability = error_rate, .fault = FaultKind::kSlowDown503});
  if (reset_rate > 0) {
    (*proxy)->AddRule(
        {.probability = reset_rate, .fault = FaultKind::kResetAfterBytes, .after_bytes = 1000});
  }
  if (truncate_rate > 0) {
    (*proxy)->AddRule(
        {.probability = truncate_rate, .fault = FaultKind::kTruncateBody, .after_bytes = 1000});
  }
  if (stall_rate > 0) {
    (*proxy)->AddRule({.probability = stall_rate,
                       .fault = FaultKind::kStall,
                       .stall = absl::Milliseconds(stall_ms)});
  }
  std::printf("listening on %s\n", (*proxy)->endpoint().c_str());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::string by_kind;
  for (FaultKind kind : {FaultKind::kSlowDown503, FaultKind::kResetAfterBytes,
                         FaultKind::kTruncateBody, FaultKind::kStall}) {
    by_kind += stoker::StrCat(" ", stoker::testing::FaultKindName(kind), "=",
                              (*proxy)->faults_injected(kind));
  }
  std::fprintf(stderr, "stoker-fault-proxy: %lld requests, %lld faults injected:%s\n",
               static_cast<long long>((*proxy)->requests_seen()),
               static_cast<long long>((*proxy)->faults_injected()), by_kind.c_str());
  return 0;
}
