// Progress on the command line: one line with bytes, items, rate and ETA, redrawn on stderr while
// a command runs (cp, sync, run, consume). Shown when stderr is a terminal; --progress forces it
// (a plain line every 2 s when stderr is not a terminal) and --quiet hides it.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace stoker::cli {

enum class ProgressMode { kAuto, kOn, kOff };

// Adds --progress and -q/--quiet to `command`, writing the choice to *mode (which must outlive
// parsing).
void AddProgressFlags(CLI::App* command, ProgressMode* mode);

// "1.5 MiB", "12 B"; "3m05s", "1h02m" ("?" when negative or absurd).
std::string HumanBytes(double bytes);
std::string HumanDuration(double seconds);

// Thread safety: Add and SetTotals may be called from any thread; Finish from the owner.
class Progress {
 public:
  // `label` starts the line ("cp"); `unit` names the items counted ("files", "elements").
  Progress(std::string label, std::string unit, ProgressMode mode);
  ~Progress() { Finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Totals, when known (0: unknown). The ETA uses bytes when their total is known, else items.
  void SetTotals(int64_t bytes, int64_t items);
  void Add(int64_t bytes, int64_t items = 0);
  // Stops redrawing and, when shown, prints the final line. Idempotent.
  void Finish();

  bool shown() const { return thread_.joinable(); }

 private:
  void Loop();
  void Print(bool final_line);

  const std::string label_, unit_;
  const bool tty_;
  const absl::Time start_;
  std::atomic<int64_t> bytes_{0}, items_{0}, total_bytes_{0}, total_items_{0};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace stoker::cli
