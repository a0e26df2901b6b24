// Each group of subcommands registers itself on the root app. A command's callback stores its
// result in *result; main prints a failed status as "stoker: <message>" and exits 1.
#pragma once

#include <CLI/CLI.hpp>

#include "absl/status/status.h"

namespace stoker::cli {

void RegisterIoCommands(CLI::App& app, absl::Status* result);
void RegisterFormatCommands(CLI::App& app, absl::Status* result);
void RegisterRunCommands(CLI::App& app, absl::Status* result);
void RegisterServiceCommands(CLI::App& app, absl::Status* result);
void RegisterMountCommands(CLI::App& app, absl::Status* result);

}  // namespace stoker::cli
