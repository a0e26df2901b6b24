// The `stoker` command (README.md, "The command line"; docs/architecture.md).
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "stoker/cli/commands.h"
#include "stoker/core/logging.h"

int main(int argc, char** argv) {
  stoker::InitLogging();
  // Debian's abseil is built with mutex deadlock detection on: it tracks every lock order, about
  // 1% of a service worker's CPU (profiled). Tests (the ASan build) keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"stoker: keeps accelerators fed with training data"};
  app.require_subcommand(1);
  absl::Status result;
  stoker::cli::RegisterIoCommands(app, &result);
  stoker::cli::RegisterFormatCommands(app, &result);
  stoker::cli::RegisterRunCommands(app, &result);
  stoker::cli::RegisterServiceCommands(app, &result);
  stoker::cli::RegisterMountCommands(app, &result);
  stoker::cli::RegisterBenchReadCommand(app, &result);
  CLI11_PARSE(app, argc, argv);
  if (!result.ok()) {
    std::fprintf(stderr, "stoker: %s\n", std::string(result.message()).c_str());
    return 1;
  }
  return 0;
}
