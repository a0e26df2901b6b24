// Dispatcher::StatusPage: the HTML status page served at `/` (docs/operations.md, "Status page").
// It reads the same state as the /metrics collector, under the dispatcher's mutex.
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/core/markup.h"
#include "stoker/core/strings.h"
#include "stoker/service/dispatcher/dispatcher.h"

namespace stoker::service {
namespace {

// One table row of already escaped cells.
std::string Row(std::initializer_list<std::string> cells, const char* tag = "td") {
  std::string row = "<tr>";
  for (const std::string& c : cells) row += StrCat("<", tag, ">", c, "</", tag, ">");
  return row + "</tr>\n";
}

constexpr char kStyle[] =
    "body{font-family:sans-serif;margin:1em 2em;color:#222}"
    "table{border-collapse:collapse;margin-bottom:1.5em}"
    "th,td{border:1px solid #bbb;padding:2px 8px;text-align:left}"
    "th{background:#eee}td.n{text-align:right}"
    ".unhealthy,.silent,.failed,.warning{color:#b00;font-weight:bold}"
    ".finished{color:#070}";

// `x` with `digits` decimals ("inf" for infinity).
std::string Fixed(double x, int digits) {
  if (std::isinf(x)) return "inf";
  return absl::StrFormat("%.*f", digits, x);
}

}  // namespace

std::string Dispatcher::StatusPage() const {
  constexpr size_t kMaxJobs = 50;  // the newest; older ones are in the journal and the logs
  absl::MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  std::string page = StrCat(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"refresh\" content=\"2\"><title>stoker dispatcher</title><style>",
      kStyle, "</style></head><body>\n<h1>stoker dispatcher</h1>\n<p>gRPC port ", port_,
      " &middot; ", updates_, " updates applied &middot; ", state_.clients().size(),
      " consumers &middot; ",
      EscapeMarkup(absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone())),
      "</p>\n");

  // Workers: splits leased now (not yet acknowledged), counted over every job.
  std::map<int64_t, int64_t> leased;
  for (const auto& [job_id, job] : state_.jobs())
    for (const auto& [split_id, split] : job.splits)
      if (!split.done && split.worker_id != 0) ++leased[split.worker_id];
  page += StrCat(
      "<h2>Workers (<span id=\"worker-count\">", state_.workers().size(),
      "</span>)</h2>\n<table id=\"workers\">\n",
      Row({"id", "address", "state", "tasks", "splits leased", "busy share", "elements/s"}, "th"));
  for (const auto& [id, w] : state_.workers()) {
    std::string s = "healthy";
    auto u = unhealthy_.find(id);
    auto seen = last_heartbeat_.find(id);
    if (u != unhealthy_.end()) {
      s = "unhealthy";
    } else if (seen != last_heartbeat_.end() && now - seen->second > options_.worker_timeout / 2) {
      s = "silent";  // no heartbeat for half the timeout: removed at the timeout
    }
    auto r = running_.find(id);
    std::string state = StrCat("<span class=\"", s, "\">", s, "</span>");
    if (u != unhealthy_.end()) state += StrCat(": ", EscapeMarkup(u->second));
    auto rates = worker_rates_.find(id);
    const bool measured = rates != worker_rates_.end();
    page +=
        StrCat(Row({std::to_string(id), EscapeMarkup(w.address), state,
                    std::to_string(r == running_.end() ? 0 : r->second.size()),
                    std::to_string(leased[id]), measured ? Fixed(rates->second.busy_share, 2) : "-",
                    measured ? Fixed(rates->second.elements_per_second, 1) : "-"}));
  }
  page += "</table>\n";
  // The worker count: registered (healthy), the rule's recommendation, the autoscaler's target.
  int healthy = 0;
  for (const auto& [id, w] : state_.workers()) healthy += unhealthy_.count(id) ? 0 : 1;
  page += StrCat("<p id=\"worker-count-summary\">Workers: actual <span id=\"actual-workers\">",
                 healthy, "</span> &middot; recommended <span id=\"recommended-workers\">",
                 recommended_ >= 0 ? std::to_string(recommended_) : std::string("?"),
                 "</span> &middot; autoscaler target <span id=\"target-workers\">",
                 target_ >= 0 ? std::to_string(target_) : std::string("off"), "</span>",
                 target_ >= 0 ? StrCat(" (", EscapeMarkup(last_decision_), ")") : std::string(),
                 " &middot; demand ", load_.demand < 0 ? std::string("?") : Fixed(load_.demand, 1),
                 " elements/s &middot; ", Fixed(load_.throughput, 1),
                 " elements/s per busy worker &middot; stall ratio ", Fixed(load_.stall_ratio, 2),
                 "</p>\n");

  // Jobs, newest first.
  page += StrCat("<h2>Jobs (", state_.jobs().size(), ")</h2>\n<table id=\"jobs\">\n",
                 Row({"id", "name", "state", "consumers", "splits done", "positions done",
                      "epochs done", "splits outstanding", "elements/s", "stall ratio"},
                     "th"));
  size_t listed = 0;
  for (auto it = state_.jobs().rbegin(); it != state_.jobs().rend() && listed < kMaxJobs;
       ++it, ++listed) {
    const DispatcherState::Job& job = it->second;
    const char* s = !job.error.empty()        ? "failed"
                    : !job.ended.empty()      ? "ended"
                    : state_.JobFinished(job) ? "finished"
                                              : "running";
    std::string state = StrCat("<span class=\"", s, "\">", s, "</span>");
    if (!job.error.empty()) state += StrCat(": ", EscapeMarkup(job.error));
    if (!job.ended.empty()) state += StrCat(": ", EscapeMarkup(job.ended));
    int64_t positions_done = 0, outstanding = static_cast<int64_t>(job.pending.size());
    for (const auto& [split_id, split] : job.splits) {
      if (split.done)
        positions_done += split.end - split.begin;
      else if (split.worker_id != 0)
        ++outstanding;
    }
    auto jr = job_rates_.find(job.id);
    std::string total = job.num_samples > 0 ? std::to_string(job.positions()) : "?";
    page += StrCat(Row(
        {std::to_string(job.id), EscapeMarkup(job.name), state, std::to_string(job.clients.size()),
         StrCat(job.done_splits, " / ", job.splits.size()), StrCat(positions_done, " / ", total),
         StrCat(job.epochs_done() - job.first_epoch, " / ", job.num_epochs),
         std::to_string(outstanding),
         jr == job_rates_.end() ? "-" : Fixed(jr->second.elements_per_second, 1),
         jr == job_rates_.end() || jr->second.stall_ratio < 0 ? "-"
                                                              : Fixed(jr->second.stall_ratio, 2)}));
  }
  page += "</table>\n";

  // The last events, newest first.
  page += StrCat("<h2>Recent events</h2>\n<table id=\"events\">\n",
                 Row({"time (UTC)", "level", "event"}, "th"));
  for (auto it = events_.rbegin(); it != events_.rend(); ++it)
    page += StrCat(Row({EscapeMarkup(it->time),
                        StrCat("<span class=\"", EscapeMarkup(it->level), "\">",
                               EscapeMarkup(it->level), "</span>"),
                        EscapeMarkup(it->message)}));
  page += "</table>\n</body></html>\n";
  return page;
}

}  // namespace stoker::service
