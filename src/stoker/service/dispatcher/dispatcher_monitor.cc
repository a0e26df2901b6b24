// The dispatcher's background work (dispatcher.h): MonitorPeers (the "dispatcher-mon" thread:
// removes workers and consumers that missed their heartbeats, and ends jobs nobody consumes),
// MeasureLoop (the "dispatcher-load" thread: every load_interval, the load from the heartbeats'
// counters, the recommended worker count, and the autoscaler's decisions acted on through its
// actuator), StartAutoscaler, and CollectMetrics (the state's gauges at each /metrics scrape).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/core/logging.h"
#include "stoker/core/strings.h"
#include "stoker/service/dispatcher/dispatcher.h"

namespace stoker::service {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void Dispatcher::CollectMetrics(MetricsWriter& w) {
  using T = MetricsWriter::Type;
  absl::MutexLock lock(&mu_);
  w.Write("stoker_dispatcher_workers", "Workers registered now", T::kGauge, {},
          static_cast<double>(state_.workers().size()));
  w.Write("stoker_dispatcher_unhealthy_workers",
          "Registered workers that report being unhealthy (they get no new tasks)", T::kGauge, {},
          static_cast<double>(unhealthy_.size()));
  w.Write("stoker_dispatcher_clients", "Consumers registered now", T::kGauge, {},
          static_cast<double>(state_.clients().size()));
  std::map<std::string, int64_t> jobs = {
      {"running", 0}, {"finished", 0}, {"ended", 0}, {"failed", 0}};
  const auto now = Clock::now();
  const double now_unix = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  for (const auto& [id, job] : state_.jobs()) {
    const char* s = !job.error.empty()        ? "failed"
                    : !job.ended.empty()      ? "ended"
                    : state_.JobFinished(job) ? "finished"
                                              : "running";
    ++jobs[s];
    if (std::string_view(s) != "running") continue;  // series of running jobs only
    // Labelled by id and by the name operators see (the job name, else the display name its
    // consumer sent): series exist only while a job runs, so both stay bounded by --max-jobs.
    MetricLabels j = {{"job_id", std::to_string(id)}, {"job_name", job.label()}};
    MetricLabels info = j;
    info.emplace_back("display_name", job.display_name);
    info.emplace_back("dataset", DatasetLabel(job.fingerprint));
    w.Write("stoker_job_info",
            "1 for each running job, labelled with what it is: name, the display name its first "
            "consumer sent (<user>@<host>:<program>), dataset (its spec's source)",
            T::kGauge, info, 1);
    if (job.created > 0)
      w.Write("stoker_job_age_seconds", "Seconds since the job was created", T::kGauge, j,
              std::max(0.0, now_unix - job.created));
    w.Write("stoker_job_clients", "Consumers of a running job", T::kGauge, j,
            static_cast<double>(job.clients.size()));
    w.Write("stoker_job_silent_clients",
            "Consumers of a running job not heard from for 2 s (stopped or dead): the job waits "
            "for their timeout",
            T::kGauge, j, static_cast<double>(SilentClients(job, now).size()));
    int64_t leased = 0, positions_delivered = 0;
    for (const auto& [split_id, split] : job.splits) {
      if (!split.done && split.worker_id != 0) ++leased;
      if (split.done) positions_delivered += split.end - split.begin;
    }
    if (!job.open_ended) {  // an open-ended job's num_epochs is only a cap: no planned total
      w.Write("stoker_job_positions",
              "Samples of all the job's planned epochs (0 until counted; absent for open-ended "
              "jobs)",
              T::kGauge, j, static_cast<double>(job.positions()));
      w.Write("stoker_job_epochs", "Epochs the job plans (absent for open-ended jobs)", T::kGauge,
              j, static_cast<double>(job.num_epochs));
    }
    w.Write("stoker_job_positions_handed_out", "Samples of the job handed out in splits so far",
            T::kGauge, j, static_cast<double>(job.next_sample));
    w.Write("stoker_job_positions_delivered",
            "Samples of the job's splits its consumers acknowledged (delivered in full)", T::kGauge,
            j, static_cast<double>(positions_delivered));
    w.Write("stoker_job_epochs_done", "Epochs of the job delivered in full", T::kGauge, j,
            static_cast<double>(job.epochs_done() - job.first_epoch));
    for (auto [state, n] : {std::pair<const char*, int64_t>{"done", job.done_splits},
                            {"leased", leased},
                            {"pending", static_cast<int64_t>(job.pending.size())}}) {
      MetricLabels l = j;
      l.emplace_back("state", state);
      w.Write("stoker_job_splits", "Splits of a running job by state", T::kGauge, l,
              static_cast<double>(n));
    }
  }
  for (const auto& [state, n] : jobs)
    w.Write("stoker_dispatcher_jobs", "Jobs by state", T::kGauge, {{"state", state}},
            static_cast<double>(n));
  w.Write("stoker_dispatcher_jobs_created_total", "Jobs created since the journal began",
          T::kCounter, {}, static_cast<double>(state_.next_job_id() - 1));
  // The load of the last interval and the worker count it calls for (docs/operations.md).
  if (recommended_ >= 0)
    w.Write("stoker_dispatcher_recommended_workers",
            "Workers the rule N = ceil(headroom * demand / worker throughput) calls for", T::kGauge,
            {}, recommended_);
  if (target_ >= 0)
    w.Write("stoker_dispatcher_target_workers", "Workers the autoscaler asks its actuator for",
            T::kGauge, {}, target_);
  if (load_.demand >= 0 && std::isfinite(load_.demand))
    w.Write("stoker_dispatcher_demand_elements_per_second",
            "Elements per second the consumers would take if they never waited", T::kGauge, {},
            load_.demand);
  w.Write("stoker_dispatcher_worker_throughput_elements_per_second",
          "Mean elements a worker produces per busy second (0: not measured)", T::kGauge, {},
          load_.throughput);
  w.Write("stoker_dispatcher_worker_busy_share",
          "Mean share of the last interval workers were busy", T::kGauge, {}, load_.busy_share);
  w.Write("stoker_dispatcher_stall_ratio",
          "Share of the consumers' time spent waiting for data over the last interval", T::kGauge,
          {}, load_.stall_ratio);
}

void Dispatcher::StartAutoscaler(std::unique_ptr<WorkerActuator> actuator) {
  auto autoscaler =
      std::make_unique<Autoscaler>(options_.autoscaler, options_.autoscaler.min_workers);
  // Before the measuring thread sees the actuator, so no other thread calls it now.
  absl::Status s = actuator->Scale(autoscaler->target());
  if (!s.ok()) SPDLOG_WARN("autoscaler: could not start: {}; retrying", s.ToString());
  absl::MutexLock lock(&mu_);
  target_ = autoscaler->target();
  autoscaler_ = std::move(autoscaler);
  actuator_ = std::move(actuator);
  SPDLOG_INFO("autoscaler: {} .. {} workers, starting with {}", options_.autoscaler.min_workers,
              options_.autoscaler.max_workers, target_);
  last_decision_ = "start";
}

AutoscalerLoad Dispatcher::MeasureLoad(double seconds) {
  AutoscalerLoad load;
  worker_rates_.clear();
  job_rates_.clear();
  // Workers: busy share, elements per second, elements per busy second.
  double capacity_sum = 0, busy_sum = 0;
  int capacity_n = 0, measured_n = 0;
  absl::flat_hash_map<int64_t, WorkerTotals> worker_now;
  for (const auto& [id, w] : state_.workers()) {
    if (unhealthy_.count(id)) continue;
    ++load.workers;
    auto now = worker_totals_.find(id);
    if (now == worker_totals_.end()) continue;
    worker_now[id] = now->second;
    auto before = worker_measured_.find(id);
    if (before == worker_measured_.end()) continue;  // joined during the interval
    double busy = std::max(0.0, now->second.busy_seconds - before->second.busy_seconds);
    double produced =
        static_cast<double>(std::max<int64_t>(0, now->second.produced - before->second.produced));
    WorkerRates& r = worker_rates_[id];
    r.busy_share = std::min(1.0, busy / seconds);
    r.elements_per_second = produced / seconds;
    busy_sum += r.busy_share;
    ++measured_n;
    // Enough busy time to say what a busy worker produces.
    if (busy >= 0.05 * seconds && produced > 0) {
      capacity_sum += produced / busy;
      ++capacity_n;
    }
  }
  load.busy_share = measured_n > 0 ? busy_sum / measured_n : 0;
  load.throughput = capacity_n > 0 ? capacity_sum / capacity_n : 0;
  worker_measured_ = std::move(worker_now);
  for (auto it = worker_totals_.begin(); it != worker_totals_.end();) {
    if (state_.workers().count(it->first)) {
      ++it;
    } else {
      worker_totals_.erase(it++);
    }
  }
  // Consumers: demand (elements / compute seconds) and stall, in all and per job.
  double wait_sum = 0, compute_sum = 0, demand = 0, delivered = 0;
  bool demand_known = false;
  absl::flat_hash_map<int64_t, ClientTotals> client_now;
  absl::flat_hash_map<int64_t, std::pair<double, double>> job_time;  // wait, compute
  for (const auto& [id, c] : state_.clients()) {
    ++load.consumers;
    auto now = client_totals_.find(id);
    if (now == client_totals_.end()) continue;
    client_now[id] = now->second;
    auto before = client_measured_.find(id);
    if (before == client_measured_.end()) continue;
    double wait = std::max(0.0, now->second.wait_seconds - before->second.wait_seconds);
    double compute = std::max(0.0, now->second.compute_seconds - before->second.compute_seconds);
    double elements =
        static_cast<double>(std::max<int64_t>(0, now->second.elements - before->second.elements));
    // Elements that followed the trainer's work (compute is measured from one element to the
    // next call); in the interval of its first element, the wait for it is the job's start-up,
    // which more workers do not shorten, and no work preceded it.
    double paced = elements;
    if (before->second.first_wait_seconds == 0 && now->second.first_wait_seconds > 0) {
      wait = std::max(0.0, wait - now->second.first_wait_seconds);
      paced = std::max(0.0, paced - 1);
    }
    wait_sum += wait;
    compute_sum += compute;
    job_time[c.job_id].first += wait;
    job_time[c.job_id].second += compute;
    job_rates_[c.job_id].elements_per_second += elements / seconds;
    if (paced > 0) {
      if (wait + compute > 0) delivered += paced / (wait + compute);
      demand_known = true;
      demand += compute > 1e-6 ? paced / compute : std::numeric_limits<double>::infinity();
    }
  }
  for (const auto& [job_id, t] : job_time)
    if (t.first + t.second > 0) job_rates_[job_id].stall_ratio = t.first / (t.first + t.second);
  client_measured_ = std::move(client_now);
  for (auto it = client_totals_.begin(); it != client_totals_.end();) {
    if (state_.clients().count(it->first)) {
      ++it;
    } else {
      first_look_due_.erase(it->first);
      client_totals_.erase(it++);
    }
  }
  load.demand = demand_known ? demand : -1;
  load.delivered = delivered;
  load.stall_ratio = wait_sum + compute_sum > 0 ? wait_sum / (wait_sum + compute_sum) : 0;
  return load;
}

void Dispatcher::RememberNeed(const AutoscalerLoad& load) {
  // Only a pipeline read alone (the rule sums every job's demand), its trainers not stalling
  // (else the rule may not have reached what they need), not from a first look's short window.
  if (load.first_look || recommended_ <= 0 || load.stall_ratio > options_.autoscaler.stall_high)
    return;
  absl::flat_hash_set<int64_t> read_jobs;
  for (const auto& [id, c] : state_.clients()) read_jobs.insert(c.job_id);
  if (read_jobs.size() != 1) return;
  const auto* job = state_.FindJob(*read_jobs.begin());
  if (job == nullptr) return;
  RememberedNeed& need = remembered_need_[job->fingerprint];
  if (need.job_id != job->id) need = {job->id, 0};
  need.workers = std::max(need.workers, recommended_);
}

void Dispatcher::MeasureLoop() {
  auto last = Clock::now();
  bool retry = true;  // the last request to the actuator failed (or StartAutoscaler's, maybe)
  while (true) {
    Autoscaler* autoscaler = nullptr;
    WorkerActuator* actuator = nullptr;
    AutoscalerLoad load;
    int remembered = 0;  // > 0: a job of a remembered pipeline started
    std::string remembered_reason;
    std::string guess_reason;  // not empty: a job of a pipeline never read started
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this] {
        return stopping_ || measure_now_ || remembered_start_ > 0 || !guess_reason_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::FromChrono(options_.load_interval));
      if (stopping_) return;
      const bool first_look = measure_now_;  // else the interval's end
      measure_now_ = false;
      auto now = Clock::now();
      load = MeasureLoad(std::max(1e-3, std::chrono::duration<double>(now - last).count()));
      load.first_look = first_look;
      last = now;
      Autoscaler rule_only(options_.autoscaler, load.workers);
      recommended_ = rule_only.Rule(load);
      load_ = load;
      autoscaler = autoscaler_.get();
      actuator = actuator_.get();
      remembered = std::exchange(remembered_start_, 0);
      remembered_reason = std::move(remembered_reason_);
      guess_reason = std::exchange(guess_reason_, {});
      if (autoscaler != nullptr) RememberNeed(load);
    }
    if (autoscaler == nullptr) continue;
    const int before = autoscaler->target();
    AutoscalerDecision d =
        remembered > 0 ? autoscaler->Remembered(remembered, std::move(remembered_reason))
        : !guess_reason.empty()
            ? autoscaler->Guess(autoscaler->target() + actuator->standby_workers(),
                                std::move(guess_reason))
            : autoscaler->Decide(load);
    absl::Status s = absl::OkStatus();
    if (d.changed || retry) s = actuator->Scale(d.target);
    actuator->Tick();
    retry = !s.ok();
    absl::MutexLock lock(&mu_);
    target_ = d.target;
    if (d.changed) {
      std::string line =
          StrCat("autoscaler: ", before, " -> ", d.target, " workers (", d.reason, ")");
      SPDLOG_INFO("{}", line);
      RecordEvent("info", line);
      last_decision_ = d.reason;
    }
    if (!s.ok()) {
      SPDLOG_WARN("autoscaler: could not scale to {} workers: {}; retrying", d.target,
                  s.ToString());
      RecordEvent("warning",
                  StrCat("autoscaler: could not scale to ", d.target, " workers: ", s.message()));
    }
  }
}

void Dispatcher::MonitorPeers() {
  absl::MutexLock lock(&mu_);
  auto interval = absl::Milliseconds(std::max<int64_t>(
      10, std::min(options_.worker_timeout.count(), options_.client_timeout.count()) / 4));
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval);
    if (stopping_) break;
    auto now = Clock::now();
    std::vector<int64_t> lost;
    for (const auto& [id, w] : state_.workers()) {
      auto it = last_heartbeat_.find(id);
      if (it == last_heartbeat_.end() || now - it->second > options_.worker_timeout)
        lost.push_back(id);
    }
    for (int64_t id : lost) {
      SPDLOG_WARN("dispatcher: worker {} ({}) missed its heartbeats; leasing its splits again", id,
                  state_.workers().at(id).address);
      RecordEvent("warning", StrCat("worker ", id, " (", state_.workers().at(id).address,
                                    ") missed its heartbeats; its splits are leased again"));
      absl::Status s = Update({{"type", "remove_worker"}, {"worker_id", id}});
      if (!s.ok()) SPDLOG_ERROR("dispatcher: {}", s.ToString());
      last_heartbeat_.erase(id);
    }
    CheckClients(now);
  }
}

void Dispatcher::CheckClients(Clock::time_point now) {
  std::vector<int64_t> silent;
  for (const auto& [id, c] : state_.clients()) {
    auto it = client_seen_.find(id);
    if (it == client_seen_.end() || now - it->second > options_.client_timeout)
      silent.push_back(id);
  }
  for (int64_t id : silent) {
    absl::Status s = RemoveClient(
        id, StrCat("missed its heartbeats for ", options_.client_timeout.count() / 1000.0, " s"));
    if (!s.ok()) SPDLOG_ERROR("dispatcher: {}", s.ToString());
  }
  // A running job without a live consumer for the client timeout is ended: nobody will read it.
  std::vector<int64_t> orphans;
  for (const auto& [id, job] : state_.jobs()) {
    if (!job.ended.empty() || !job.clients.empty() || !job.error.empty() ||
        state_.JobFinished(job)) {
      job_unconsumed_since_.erase(id);
      continue;
    }
    auto [it, inserted] = job_unconsumed_since_.try_emplace(id, now);
    if (now - it->second > options_.client_timeout) orphans.push_back(id);
  }
  for (int64_t id : orphans) {
    std::string reason = StrCat("no consumer for ", options_.client_timeout.count() / 1000.0, " s");
    absl::Status s = Update({{"type", "end_job"}, {"job_id", id}, {"reason", reason}});
    if (!s.ok()) SPDLOG_ERROR("dispatcher: {}", s.ToString());
    job_unconsumed_since_.erase(id);
  }
}

}  // namespace stoker::service
