// Dispatcher::StatusPage: the HTML status page served at `/` (docs/operations.md, "Status page").
// It reads the same state as the /metrics collector, under the dispatcher's mutex.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
    ".finished{color:#070}.reason{color:#555}";

// `x` with `digits` decimals ("inf" for infinity).
std::string Fixed(double x, int digits) {
  if (std::isinf(x)) return "inf";
  return absl::StrFormat("%.*f", digits, x);
}

// A duration for people: "42 s", "5 min 3 s", "2 h 14 min", "3 d 4 h".
std::string Age(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds));
  if (s < 60) return StrCat(s, " s");
  if (s < 3600) return StrCat(s / 60, " min ", s % 60, " s");
  if (s < 86400) return StrCat(s / 3600, " h ", s % 3600 / 60, " min");
  return StrCat(s / 86400, " d ", s % 86400 / 3600, " h");
}

// Whole seconds left of a duration, rounded up ("12").
int64_t SecondsLeft(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return std::max<int64_t>(0, (ms + 999) / 1000);
}

// One source object of a spec as a short text: its URL (the first of several, with how many
// more), `range N`, `memory NAME`, or its kind.
std::string DescribeSourceObject(const nlohmann::json& source) {
  if (!source.is_object() || source.empty()) return "?";
  if (auto mix = source.find("mix"); mix != source.end() && mix->is_array()) {
    std::string out = "mix of ";
    size_t shown = 0;
    for (const auto& stream : *mix) {
      if (shown == 2) return StrCat(out, " (+", mix->size() - shown, " more)");
      out += StrCat(shown > 0 ? ", " : "", DescribeSourceObject(stream));
      ++shown;
    }
    return out;
  }
  for (const char* kind : {"dataset", "tfrecord", "tar", "range", "memory"}) {
    auto it = source.find(kind);
    if (it == source.end()) continue;
    if (it->is_string()) {
      return std::string(kind) == "memory" ? StrCat("memory ", it->get<std::string>())
                                           : it->get<std::string>();
    }
    if (it->is_number_integer()) return StrCat(kind, " ", it->dump());
    if (it->is_array() && !it->empty() && (*it)[0].is_string())
      return it->size() == 1 ? (*it)[0].get<std::string>()
                             : StrCat((*it)[0].get<std::string>(), " (+", it->size() - 1, " more)");
    return kind;
  }
  return source.begin().key();
}

}  // namespace

const std::string& Dispatcher::DatasetLabel(const std::string& fingerprint) const {
  auto [it, inserted] = dataset_labels_.try_emplace(fingerprint);
  if (!inserted) return it->second;
  auto spec = state_.datasets().find(fingerprint);
  nlohmann::json j = spec == state_.datasets().end()
                         ? nlohmann::json()
                         : nlohmann::json::parse(spec->second, nullptr, /*allow_exceptions=*/false);
  std::string label =
      j.is_object() && j.contains("source") ? DescribeSourceObject(j["source"]) : "?";
  constexpr size_t kMax = 160;  // a label, not the spec
  if (label.size() > kMax) {
    size_t n = kMax;
    while (n > 0 && (static_cast<unsigned char>(label[n]) & 0xC0) == 0x80) --n;
    label = label.substr(0, n) + "...";
  }
  it->second = std::move(label);
  return it->second;
}

std::vector<std::pair<int64_t, std::chrono::steady_clock::duration>> Dispatcher::SilentClients(
    const DispatcherState::Job& job, std::chrono::steady_clock::time_point now) const {
  // Consumers heartbeat every 200 ms by default (at most a few seconds apart, however busy): one
  // not heard for 2 s (or half the timeout, if that is shorter) has stopped or died.
  const auto silent_after = std::min<std::chrono::steady_clock::duration>(
      std::chrono::seconds(2), options_.client_timeout / 2);
  std::vector<std::pair<int64_t, std::chrono::steady_clock::duration>> silent;
  for (int64_t c : job.clients) {
    auto seen = client_seen_.find(c);
    if (seen == client_seen_.end() || now - seen->second <= silent_after) continue;
    silent.emplace_back(c, options_.client_timeout - (now - seen->second));
  }
  std::sort(silent.begin(), silent.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  return silent;
}

std::string Dispatcher::RunningReason(const DispatcherState::Job& job,
                                      std::chrono::steady_clock::time_point now) const {
  if (job.clients.empty()) {
    auto since = job_unconsumed_since_.find(job.id);
    const auto left = options_.client_timeout - (since == job_unconsumed_since_.end()
                                                     ? std::chrono::steady_clock::duration()
                                                     : now - since->second);
    return StrCat(job.ever_had_client ? "no consumer" : "waiting for its first consumer",
                  " (ended in ", SecondsLeft(left), " s unless one joins)");
  }
  const auto silent = SilentClients(job, now);
  std::string reason;
  if (!silent.empty()) {
    // The job ends (or, coordinated, fails) when the last silent consumer's timeout removes it
    // and no consumer is left; name the one waited for longest.
    const auto& [client, left] = silent.back();
    const bool all = silent.size() == job.clients.size();
    std::string who = StrCat("consumer ", client);
    if (job.num_consumers > 0) {
      auto c = state_.clients().find(client);
      if (c != state_.clients().end()) who += StrCat(" (index ", c->second.consumer_index, ")");
    }
    reason = StrCat(all ? "no consumer is reading: " : "", "waiting for ", who, "'s timeout (",
                    SecondsLeft(left), " s left)",
                    silent.size() > 1 ? StrCat(" and ", silent.size() - 1, " more silent") : "",
                    job.num_consumers > 0 ? "; the coordinated job then fails" : "");
    if (all) return reason;
  }
  std::string main;
  if (state_.workers().empty()) {
    main = "waiting for a worker (none registered)";
  } else if (job.sharding == Sharding::kDynamic && job.num_samples == 0) {
    main = "waiting for a worker to count its samples";
  } else {
    const size_t reading = job.clients.size() - silent.size();
    main = StrCat(reading, reading == 1 ? " consumer reading" : " consumers reading");
  }
  return reason.empty() ? main : StrCat(main, "; ", reason);
}

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
  page += StrCat(
      "<h2>Jobs (", state_.jobs().size(), ")</h2>\n<table id=\"jobs\">\n",
      Row({"id", "name", "created by", "age", "dataset", "state", "consumers", "epochs done",
           "positions delivered", "splits done", "splits outstanding", "elements/s", "stall ratio"},
          "th"));
  const double now_unix = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
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
    if (std::string_view(s) == "running")
      state +=
          StrCat(": <span class=\"reason\">", EscapeMarkup(RunningReason(job, now)), "</span>");
    int64_t positions_done = 0, outstanding = static_cast<int64_t>(job.pending.size());
    for (const auto& [split_id, split] : job.splits) {
      if (split.done)
        positions_done += split.end - split.begin;
      else if (split.worker_id != 0)
        ++outstanding;
    }
    auto jr = job_rates_.find(job.id);
    // What was read, and the planned total only where the job has one (not an open-ended job,
    // whose num_epochs is only a cap).
    std::string epochs = std::to_string(job.epochs_done() - job.first_epoch);
    std::string positions = std::to_string(positions_done);
    if (!job.open_ended) {
      epochs += StrCat(" / ", job.num_epochs);
      positions += StrCat(" / ", job.num_samples > 0 ? std::to_string(job.positions()) : "?");
    }
    if (job.first_epoch > 0) epochs += StrCat(" (from epoch ", job.first_epoch, ")");
    std::string consumers = std::to_string(job.clients.size());
    if (!job.clients.empty()) {
      consumers += " (";
      size_t n = 0;
      for (int64_t c : job.clients) {
        if (n == 8) {
          consumers += ", ...";
          break;
        }
        consumers += StrCat(n++ > 0 ? ", " : "", c);
      }
      consumers += ")";
    }
    page += StrCat(Row(
        {std::to_string(job.id), EscapeMarkup(job.label()), EscapeMarkup(job.display_name),
         job.created > 0 ? Age(now_unix - job.created) : std::string("?"),
         EscapeMarkup(DatasetLabel(job.fingerprint)), state, consumers, epochs, positions,
         StrCat(job.done_splits, " / ", job.splits.size()), std::to_string(outstanding),
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
