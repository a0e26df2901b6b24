// What the service's commands (dispatcher and worker in server_commands.cc, consume in
// consume_command.cc, demo in demo_command.cc) share: stop-signal handling, the --log-format flag
// and the TLS and token flags, defined in service_commands.cc, and the registration function of
// each command family, which RegisterServiceCommands (commands.h) calls in turn.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stoker/service/common/security.h"
#include "stoker/service/consumer.h"

namespace stoker::cli {

// Blocks SIGINT/SIGTERM in every thread started afterwards, so WaitForSignal receives them.
void BlockStopSignals();
// Waits for SIGINT or SIGTERM (blocked first with BlockStopSignals).
void WaitForSignal();
// Whether SIGINT or SIGTERM is pending (blocked with BlockStopSignals and not yet waited for).
bool StopSignalPending();

// --log-format, and STOKER_LOG in --help.
void AddLogOptions(CLI::App* app, std::string* format, const char* default_level);

// Which side of the service a command is: it serves, dials, or both (a worker).
enum SecuritySides { kServes = 1, kDials = 2 };

// TLS and token flags (docs/security.md), and their environment variables in --help's footer.
// `sides` is a mask of SecuritySides.
void AddSecurityOptions(CLI::App* app, service::SecurityOptions* o, int sides, bool worker);

// A flag whose value is a service mode (consumer.h), read by ParseMode into *mode; a bad value is
// refused with ParseMode's message after the flag's name ("--sharding: unknown sharding 'x': use
// 'dynamic' or 'off'"). --help shows TEXT:{the mode's spellings}.
template <typename Mode>
CLI::Option* AddModeOption(CLI::App* app, const std::string& flag, Mode* mode,
                           const std::string& help) {
  CLI::Option* option = app->add_option_function<std::string>(
      flag,
      [mode, flag](const std::string& text) {
        absl::StatusOr<Mode> parsed = service::ParseMode<Mode>(text);
        if (!parsed.ok()) throw CLI::ValidationError(flag, std::string(parsed.status().message()));
        *mode = *parsed;
      },
      help);
  std::string names;
  for (std::string_view name : service::ModeNames<Mode>())
    names += (names.empty() ? "" : ",") + std::string(name);
  return option->type_name("TEXT:{" + names + "}");
}

// stoker dispatcher and stoker worker.
void RegisterServerCommands(CLI::App& app, absl::Status* result);
// stoker consume.
void RegisterConsumeCommand(CLI::App& app, absl::Status* result);
// stoker demo.
void RegisterDemoCommand(CLI::App& app, absl::Status* result);
// stoker snapshot.
void RegisterSnapshotCommand(CLI::App& app, absl::Status* result);

}  // namespace stoker::cli
