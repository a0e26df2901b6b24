// What the service's commands (dispatcher and worker in server_commands.cc, consume in
// consume_command.cc, demo in demo_command.cc) share: stop-signal handling, the --log-format flag
// and the TLS and token flags, defined in service_commands.cc, and the registration function of
// each command family, which RegisterServiceCommands (commands.h) calls in turn.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "absl/status/status.h"
#include "stoker/service/common/security.h"

namespace stoker::cli {

// Blocks SIGINT/SIGTERM in every thread started afterwards, so WaitForSignal receives them.
void BlockStopSignals();
// Waits for SIGINT or SIGTERM (blocked first with BlockStopSignals).
void WaitForSignal();

// --log-format, and STOKER_LOG in --help.
void AddLogOptions(CLI::App* app, std::string* format, const char* default_level);

// Which side of the service a command is: it serves, dials, or both (a worker).
enum SecuritySides { kServes = 1, kDials = 2 };

// TLS and token flags (docs/security.md), and their environment variables in --help's footer.
// `sides` is a mask of SecuritySides.
void AddSecurityOptions(CLI::App* app, service::SecurityOptions* o, int sides, bool worker);

// stoker dispatcher and stoker worker.
void RegisterServerCommands(CLI::App& app, absl::Status* result);
// stoker consume.
void RegisterConsumeCommand(CLI::App& app, absl::Status* result);
// stoker demo.
void RegisterDemoCommand(CLI::App& app, absl::Status* result);
// stoker snapshot.
void RegisterSnapshotCommand(CLI::App& app, absl::Status* result);

}  // namespace stoker::cli
