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

// For commands on the data path (run, worker, consume, demo): elements, payloads and responses
// are hundreds of KiB to a few MiB each, allocated and freed at a high rate. glibc would map each
// one afresh and unmap it on free, so every element page-faults in zeroed pages (measured: half
// the CPU of a 1 MiB-element transfer through the service). Keep them on the heap instead; only
// allocations of 4 MiB and more (batches, which get huge pages) are mapped on their own.
void KeepDataPathAllocationsOnHeap();

}  // namespace stoker::cli
