// stoker-fault-proxy: the test FaultProxy as a standalone process, for benchmarks that want added
// latency (an object store "far away") or a rate of 503 SlowDown errors in front of a local server.
//
//   stoker-fault-proxy --upstream 127.0.0.1:8080 --port 0 --latency-ms 20 [--error-rate 0.01]
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
  uint64_t seed = 1;
  app.add_option("--upstream", upstream, "HOST:PORT of the server to forward to")->required();
  app.add_option("--port", port, "port to listen on at 127.0.0.1 (0: a free one)");
  app.add_option("--latency-ms", latency_ms, "delay added to every response, in milliseconds");
  app.add_option("--error-rate", error_rate,
                 "probability that a request gets 503 SlowDown instead of being forwarded")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", seed, "seed for --error-rate");
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
  if (error_rate > 0) {
    (*proxy)->AddRule(
        {.probability = error_rate, .fault = stoker::testing::FaultKind::kSlowDown503});
  }
  std::printf("listening on %s\n", (*proxy)->endpoint().c_str());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "stoker-fault-proxy: %lld requests, %lld faults injected\n",
               static_cast<long long>((*proxy)->requests_seen()),
               static_cast<long long>((*proxy)->faults_injected()));
  return 0;
}
