// Each group of subcommands registers itself on the root app. A command's callback stores its
// result in *result; main prints a failed status as "stoker: <message>" and exits 1.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::data {
struct Element;
}

namespace stoker::cli {

void RegisterIoCommands(CLI::App& app, absl::Status* result);
void RegisterFormatCommands(CLI::App& app, absl::Status* result);
void RegisterRunCommands(CLI::App& app, absl::Status* result);
void RegisterServiceCommands(CLI::App& app, absl::Status* result);
void RegisterMountCommands(CLI::App& app, absl::Status* result);
void RegisterBenchReadCommand(CLI::App& app, absl::Status* result);

// For commands on the data path (run, worker, consume, demo): elements, payloads and responses
// are hundreds of KiB to a few MiB each, allocated and freed at a high rate. glibc would map each
// one afresh and unmap it on free, so every element page-faults in zeroed pages (measured: half
// the CPU of a 1 MiB-element transfer through the service). Keep them on the heap instead; only
// allocations of 4 MiB and more (batches, which get huge pages) are mapped on their own.
void KeepDataPathAllocationsOnHeap();

// The value of a byte-size flag ("256M", "4g", "1073741824": core/byte_size.h); errors name the
// flag. Zero is refused (every size flag is a budget or a limit).
absl::StatusOr<uint64_t> ParseByteSizeFlag(std::string_view flag, std::string_view text);

// `stoker run --digest` and `stoker consume --digest`: a SHA-256 of every delivered element (keys,
// field names, dtypes, shapes and bytes, in delivery order): equal digests, equal outputs.
class ElementDigest {
 public:
  ElementDigest();
  ~ElementDigest();
  void Add(const data::Element& e);
  std::string Hex();  // once, at the end

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

}  // namespace stoker::cli
