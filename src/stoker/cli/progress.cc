#include "stoker/cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/time/clock.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"

namespace stoker::cli {

void AddProgressFlags(CLI::App* command, ProgressMode* mode) {
  command->add_flag_callback(
      "--progress", [mode] { *mode = ProgressMode::kOn; },
      "show progress (bytes, rate, ETA) on stderr even when it is not a terminal");
  command->add_flag_callback(
      "-q,--quiet", [mode] { *mode = ProgressMode::kOff; },
      "no progress display (the default when stderr is not a terminal)");
}

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof(out), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return out;
}

std::string HumanDuration(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "?";
  int s = static_cast<int>(std::lround(seconds));
  char out[32];
  if (s >= 3600) {
    std::snprintf(out, sizeof(out), "%dh%02dm", s / 3600, s / 60 % 60);
  } else {
    std::snprintf(out, sizeof(out), "%dm%02ds", s / 60, s % 60);
  }
  return out;
}

Progress::Progress(std::string label, std::string unit, ProgressMode mode)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(absl::Now()) {
  if (mode == ProgressMode::kOn || (mode == ProgressMode::kAuto && tty_)) {
    thread_ = StartThread("progress", [this] { Loop(); });
  }
}

void Progress::SetTotals(int64_t bytes, int64_t items) {
  total_bytes_ = bytes;
  total_items_ = items;
}

void Progress::Add(int64_t bytes, int64_t items) {
  bytes_ += bytes;
  items_ += items;
}

void Progress::Finish() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
  Print(/*final_line=*/true);
}

void Progress::Loop() {
  const absl::Duration period = tty_ ? absl::Milliseconds(200) : absl::Seconds(2);
  while (!stop_.WaitForNotificationWithTimeout(period)) Print(false);
}

void Progress::Print(bool final_line) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  const int64_t bytes = bytes_, items = items_, total_bytes = total_bytes_,
                total_items = total_items_;
  const double rate = seconds > 0 ? bytes / seconds : 0;
  std::string line = StrCat(label_, ": ", HumanBytes(bytes));
  double fraction = -1;
  if (total_bytes > 0) {
    fraction = std::min(1.0, static_cast<double>(bytes) / total_bytes);
    line += StrCat(" of ", HumanBytes(total_bytes));
  } else if (total_items > 0) {
    fraction = std::min(1.0, static_cast<double>(items) / total_items);
  }
  if (fraction >= 0) line += StrCat(" (", static_cast<int>(fraction * 100), "%)");
  line += StrCat(", ", HumanBytes(rate), "/s");
  if (items > 0 || total_items > 0) {
    line += StrCat(", ", items, total_items > 0 ? StrCat(" of ", total_items) : "", " ", unit_);
    if (seconds > 0) {
      char per_second[32];
      std::snprintf(per_second, sizeof(per_second), " (%.1f/s)", items / seconds);
      line += per_second;
    }
  }
  if (final_line) {
    line += StrCat(", ", HumanDuration(seconds));
  } else if (fraction > 0) {
    line += StrCat(", ETA ", HumanDuration(seconds / fraction - seconds));
  } else if (fraction == 0 || total_bytes > 0 || total_items > 0) {
    line += ", ETA ?";
  }
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace stoker::cli
