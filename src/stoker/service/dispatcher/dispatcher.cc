#include "stoker/service/dispatcher/dispatcher.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/pipeline.h"
#include "stoker/service.grpc.pb.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_util.h"

namespace stoker::service {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr char kLeft[] = "left";

// A reported total in seconds: 0 unless finite and not negative.
double Finite(double x) {
  return std::isfinite(x) && x > 0 ? x : 0;
}  // RemoveClient's reason for a consumer that said it leaves

// The in-memory state is ahead of the journal: stop, so that a restart replays a consistent
// state (clients and workers retry meanwhile).
[[noreturn]] void StopOnJournalFailure(const absl::Status& s) {
  SPDLOG_CRITICAL(
      "dispatcher: the journal failed ({}); exiting so that a restart replays a "
      "consistent state",
      s.ToString());
  std::fflush(nullptr);
  std::abort();
}

// Declared first in every RPC, so that it runs after the RPC released the mutex and before the
// reply goes out: waits until everything written to the journal so far is on disk.
struct SyncBeforeReply {
  Journal* journal;
  ~SyncBeforeReply() {
    if (journal == nullptr) return;
    absl::Status s = journal->SyncTo(journal->written());
    if (!s.ok()) StopOnJournalFailure(s);
  }
};

// The thin gRPC adapter: every call checks the caller's token first, then goes to the
// Dispatcher's logic.
class GrpcDispatcher final : public DispatcherService::Service {
 public:
  GrpcDispatcher(stoker::service::Dispatcher* d, const Security* security)
      : d_(d), security_(security) {}
  grpc::Status GetOrCreateJob(grpc::ServerContext* ctx, const GetOrCreateJobRequest* req,
                              GetOrCreateJobResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kClient, "dispatcher", "GetOrCreateJob"); !s.ok())
      return s;
    return ToGrpc(d_->GetOrCreateJob(*req, resp));
  }
  grpc::Status WorkerHeartbeat(grpc::ServerContext* ctx, const WorkerHeartbeatRequest* req,
                               WorkerHeartbeatResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kWorker, "dispatcher", "WorkerHeartbeat"); !s.ok())
      return s;
    return ToGrpc(d_->WorkerHeartbeat(*req, resp));
  }
  grpc::Status GetSplit(grpc::ServerContext* ctx, const GetSplitRequest* req,
                        GetSplitResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kWorker, "dispatcher", "GetSplit"); !s.ok())
      return s;
    return ToGrpc(d_->GetSplit(*req, resp));
  }
  grpc::Status ClientHeartbeat(grpc::ServerContext* ctx, const ClientHeartbeatRequest* req,
                               ClientHeartbeatResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kClient, "dispatcher", "ClientHeartbeat"); !s.ok())
      return s;
    return ToGrpc(d_->ClientHeartbeat(*req, resp));
  }

 private:
  stoker::service::Dispatcher* d_;
  const Security* security_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dispatcher>> Dispatcher::Start(const DispatcherOptions& options) {
  std::unique_ptr<Dispatcher> d(new Dispatcher(options));
  ASSIGN_OR_RETURN(d->security_, Security::Load(options.security));
  {
    absl::MutexLock lock(&d->mu_);
    if (!options.work_dir.empty()) {
      ASSIGN_OR_RETURN(d->journal_, Journal::Open(options.work_dir));
      ASSIGN_OR_RETURN(std::vector<json> updates, d->journal_->ReadAll());
      for (const json& u : updates) {
        absl::Status s = d->state_.Apply(u);
        if (!s.ok())
          return absl::DataLossError(
              StrCat("replaying journal ", d->journal_->path(), ": ", s.message()));
        ++d->updates_;
      }
      if (!updates.empty())
        SPDLOG_INFO("dispatcher: replayed {} updates from {}", updates.size(), d->journal_->path());
    }
    // Workers and clients known from the journal get a full timeout to heartbeat the restarted
    // dispatcher, and so do jobs to be consumed.
    for (const auto& [id, w] : d->state_.workers()) d->last_heartbeat_[id] = Clock::now();
    for (const auto& [id, c] : d->state_.clients()) d->client_seen_[id] = Clock::now();
    for (const auto& [id, job] : d->state_.jobs())
      if (job.clients.empty()) d->job_unconsumed_since_[id] = Clock::now();
  }
  d->service_ = std::make_unique<GrpcDispatcher>(d.get(), d->security_.get());
  ASSIGN_OR_RETURN(d->server_,
                   GrpcServer::Start(d->service_.get(), options.port, "dispatcher", *d->security_));
  d->port_ = d->server_->port();
  d->monitor_ = StartThread("dispatcher-mon", [p = d.get()] { p->MonitorPeers(); });
  d->measure_ = StartThread("dispatcher-load", [p = d.get()] { p->MeasureLoop(); });
  d->metrics_collector_ = MetricsRegistry::Default().AddCollector(
      [p = d.get()](MetricsWriter& w) { p->CollectMetrics(w); });
  return d;
}

Dispatcher::~Dispatcher() {
  if (metrics_collector_ != 0) MetricsRegistry::Default().RemoveCollector(metrics_collector_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (measure_.joinable()) measure_.join();
  // Before the server stops: draining workers tell the dispatcher they leave.
  std::unique_ptr<WorkerActuator> actuator;
  {
    absl::MutexLock lock(&mu_);
    actuator = std::move(actuator_);
  }
  actuator.reset();
  if (server_) server_->Shutdown();
  if (monitor_.joinable()) monitor_.join();
}

int64_t Dispatcher::updates_applied() const {
  absl::MutexLock lock(&mu_);
  return updates_;
}

absl::Status Dispatcher::Update(const json& update) {
  // Applied first, so that an update the state refuses never reaches the journal (a restart would
  // then fail on it). Nothing sees the change before it is durable: mu_ is held until the journal
  // has it, and replies go out after that. If the journal cannot take it, the state is ahead of
  // the journal: stop, so that a restart replays a consistent state (clients and workers retry).
  // A job's transitions (finished, failed, collected) are logged once, when they happen.
  const DispatcherState::Job* job = nullptr;
  bool was_finished = false, had_error = false, was_ended = false;
  if (update.contains("job_id") && update["job_id"].is_number_integer()) {
    job = state_.FindJob(update["job_id"].get<int64_t>());
    if (job != nullptr) {
      was_finished = state_.JobFinished(*job);
      had_error = !job->error.empty();
      was_ended = !job->ended.empty();
    }
  }
  RETURN_IF_ERROR(state_.Apply(update));
  if (job != nullptr) LogJobTransition(*job, was_finished, had_error, was_ended);
  if (journal_) {
    absl::Status s = journal_->Write(update).status();
    if (!s.ok()) StopOnJournalFailure(s);
  }
  ++updates_;
  const std::string type = update.value("type", "");
  MetricsRegistry& metrics = MetricsRegistry::Default();
  metrics
      .GetCounter("stoker_dispatcher_updates_total", "State updates applied and journaled, by type",
                  {{"type", type}})
      .Increment();
  if (type == "create_split" || type == "lease_split") {
    const auto& workers = state_.workers();
    auto w = workers.find(update.value("worker_id", int64_t{0}));
    MetricLabels labels = {{"worker", w == workers.end() ? "" : w->second.address}};
    metrics
        .GetCounter("stoker_dispatcher_splits_leased_total",
                    "Splits leased to workers (new and leased again), by worker address", labels)
        .Increment();
    if (type == "lease_split") {
      metrics
          .GetCounter("stoker_dispatcher_splits_leased_again_total",
                      "Splits leased again after their worker or consumer was lost, by the worker "
                      "that got them",
                      labels)
          .Increment();
    }
  }
  if (type == "remove_worker") {
    unhealthy_.erase(update.value("worker_id", int64_t{0}));
    running_.erase(update.value("worker_id", int64_t{0}));
  }
  if (type == "create_job" || type == "job_error" || type == "ack_splits" ||
      type == "worker_ended" || type == "set_job_size" || type == "remove_client" ||
      type == "end_job")
    ++tasks_version_;
  return absl::OkStatus();
}

void Dispatcher::LogJobTransition(const DispatcherState::Job& job, bool was_finished,
                                  bool had_error, bool was_ended) {
  if (!had_error && !job.error.empty()) {
    SPDLOG_WARN("dispatcher: job {} failed: {}", job.id, job.error);
    RecordEvent("warning", StrCat("job ", job.id, " failed: ", job.error));
  } else if (!was_ended && !job.ended.empty()) {
    SPDLOG_INFO("dispatcher: job {} ended: {}", job.id, job.ended);
    RecordEvent("info", StrCat("job ", job.id, " ended: ", job.ended));
  } else if (!was_finished && job.error.empty() && job.ended.empty() && state_.JobFinished(job)) {
    SPDLOG_INFO("dispatcher: job {} finished: {} epoch(s) of {} samples delivered in {} splits",
                job.id, job.num_epochs, job.num_samples, job.splits.size());
    RecordEvent("info",
                StrCat("job ", job.id, " finished: ", job.num_epochs, " epoch(s) of ",
                       job.num_samples, " samples delivered in ", job.splits.size(), " splits"));
  }
}

void Dispatcher::RecordEvent(const char* level, std::string message) {
  events_.push_back({absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::Now(), absl::UTCTimeZone()), level,
                     std::move(message)});
  while (events_.size() > kMaxEvents) events_.pop_front();
}

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
  for (const auto& [id, job] : state_.jobs()) {
    const char* s = !job.error.empty()        ? "failed"
                    : !job.ended.empty()      ? "ended"
                    : state_.JobFinished(job) ? "finished"
                                              : "running";
    ++jobs[s];
    if (std::string_view(s) != "running") continue;  // series of running jobs only
    MetricLabels j = {{"job_id", std::to_string(id)}};
    w.Write("stoker_job_clients", "Consumers of a running job", T::kGauge, j,
            static_cast<double>(job.clients.size()));
    w.Write("stoker_job_positions", "Samples of all the job's epochs (0 until counted)", T::kGauge,
            j, static_cast<double>(job.positions()));
    w.Write("stoker_job_positions_handed_out", "Samples of the job handed out in splits so far",
            T::kGauge, j, static_cast<double>(job.next_sample));
    w.Write("stoker_job_epochs_done", "Epochs of the job delivered in full", T::kGauge, j,
            static_cast<double>(job.epochs_done() - job.first_epoch));
    int64_t leased = 0;
    for (const auto& [split_id, split] : job.splits)
      if (!split.done && split.worker_id != 0) ++leased;
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
  double wait_sum = 0, compute_sum = 0, demand = 0;
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
    wait_sum += wait;
    compute_sum += compute;
    job_time[c.job_id].first += wait;
    job_time[c.job_id].second += compute;
    job_rates_[c.job_id].elements_per_second += elements / seconds;
    if (elements > 0) {
      demand_known = true;
      demand += compute > 1e-6 ? elements / compute : std::numeric_limits<double>::infinity();
    }
  }
  for (const auto& [job_id, t] : job_time)
    if (t.first + t.second > 0) job_rates_[job_id].stall_ratio = t.first / (t.first + t.second);
  client_measured_ = std::move(client_now);
  for (auto it = client_totals_.begin(); it != client_totals_.end();) {
    if (state_.clients().count(it->first)) {
      ++it;
    } else {
      client_totals_.erase(it++);
    }
  }
  load.demand = demand_known ? demand : -1;
  load.stall_ratio = wait_sum + compute_sum > 0 ? wait_sum / (wait_sum + compute_sum) : 0;
  return load;
}

void Dispatcher::MeasureLoop() {
  auto last = Clock::now();
  bool retry = true;  // the last request to the actuator failed (or StartAutoscaler's, maybe)
  while (true) {
    Autoscaler* autoscaler = nullptr;
    WorkerActuator* actuator = nullptr;
    AutoscalerLoad load;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.load_interval));
      if (stopping_) return;
      auto now = Clock::now();
      load = MeasureLoad(std::max(1e-3, std::chrono::duration<double>(now - last).count()));
      last = now;
      Autoscaler rule_only(options_.autoscaler, load.workers);
      recommended_ = rule_only.Rule(load);
      load_ = load;
      autoscaler = autoscaler_.get();
      actuator = actuator_.get();
    }
    if (autoscaler == nullptr) continue;
    const int before = autoscaler->target();
    AutoscalerDecision d = autoscaler->Decide(load);
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

absl::Status Dispatcher::RemoveClient(int64_t client_id, const std::string& why) {
  const auto& client = state_.clients().at(client_id);
  const int64_t job_id = client.job_id;
  const int64_t index = client.consumer_index;
  RETURN_IF_ERROR(Update({{"type", "remove_client"}, {"client_id", client_id}}));
  client_seen_.erase(client_id);
  held_splits_.erase(client_id);
  const auto* job = state_.FindJob(job_id);
  if (job == nullptr || !job->ended.empty() || state_.JobFinished(*job)) return absl::OkStatus();
  SPDLOG_INFO("dispatcher: client {} of job {} removed: {}", client_id, job_id, why);
  // A consumer that left said goodbye (its training ended): the others go on, and its rounds are
  // no longer waited for. One that went silent died: the others would wait for it for ever.
  if (job->num_consumers > 0 && job->error.empty() && why != kLeft) {
    // Every consumer of a coordinated job takes part in every round: without this one the others
    // would wait for ever (a rank that died). They get this error instead.
    RETURN_IF_ERROR(Update({{"type", "job_error"},
                            {"job_id", job_id},
                            {"message", StrCat("consumer ", index, " of ", job->num_consumers,
                                               " (client ", client_id, ") ", why,
                                               "; every consumer of a coordinated job must run "
                                               "until its end")}}));
  }
  if (job->clients.empty()) job_unconsumed_since_.try_emplace(job_id, Clock::now());
  return absl::OkStatus();
}

absl::Status Dispatcher::GetOrCreateJob(const GetOrCreateJobRequest& req,
                                        GetOrCreateJobResponse* resp) {
  SyncBeforeReply durable{journal_.get()};
  std::string sharding = req.sharding().empty() ? "dynamic" : req.sharding();
  if (sharding != "dynamic" && sharding != "off")
    return absl::InvalidArgumentError(
        StrCat("unknown sharding '", sharding, "': use 'dynamic' or 'off'"));
  ASSIGN_OR_RETURN(Compression compression, ParseCompression(req.compression()));
  const int64_t num_epochs = req.num_epochs() == 0 ? 1 : req.num_epochs();
  if (num_epochs < 1 || num_epochs > DispatcherState::kMaxEpochs)
    return absl::InvalidArgumentError(
        StrCat("num_epochs ", req.num_epochs(), " is not 1 .. ", DispatcherState::kMaxEpochs));
  if (req.fingerprint().empty() || req.spec_json().empty())
    return absl::InvalidArgumentError("GetOrCreateJob needs a spec and its fingerprint");
  // Datasets are keyed by fingerprint: one computed here, never trusted from the request, so a
  // wrong one cannot make another spec's jobs run this spec. (The spec itself is checked by the
  // workers, which can open its source; the dispatcher need not reach the data.)
  nlohmann::json spec = nlohmann::json::parse(req.spec_json(), nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object())
    return absl::InvalidArgumentError("GetOrCreateJob: the spec is not a JSON object");
  if (data::Pipeline::Fingerprint(spec) != req.fingerprint())
    return absl::InvalidArgumentError(StrCat(
        "GetOrCreateJob: fingerprint ", req.fingerprint().substr(0, 64), " is not the spec's (",
        data::Pipeline::Fingerprint(spec), "); send Pipeline::fingerprint() of the spec you send"));
  if (req.num_samples() < 0 || req.num_samples() > (int64_t{1} << 62) / num_epochs)
    return absl::InvalidArgumentError(
        StrCat("num_samples ", req.num_samples(), " times num_epochs must be 0 .. 2^62"));
  if (req.first_epoch() < 0 || req.first_epoch() > DispatcherState::kMaxEpochs)
    return absl::InvalidArgumentError(
        StrCat("first_epoch ", req.first_epoch(), " is not 0 .. ", DispatcherState::kMaxEpochs));
  if (req.num_consumers() < 0 || req.num_consumers() > DispatcherState::kMaxConsumers)
    return absl::InvalidArgumentError(StrCat("num_consumers ", req.num_consumers(), " is not 0 .. ",
                                             DispatcherState::kMaxConsumers));
  const std::string partial_round = req.partial_round().empty() ? "drop" : req.partial_round();
  if (partial_round != "drop" && partial_round != "pad")
    return absl::InvalidArgumentError(
        StrCat("unknown partial_round '", partial_round, "': use 'drop' or 'pad'"));
  // A resumed checkpoint: the pieces of the first epoch left to run (checked here so that a bad
  // request is an error for its sender, not a journal entry the state refuses).
  nlohmann::json resume = nlohmann::json::array();
  if (req.resuming()) {
    if (sharding != "dynamic" || req.num_samples() <= 0)
      return absl::InvalidArgumentError(
          "resuming a checkpoint needs dynamic sharding and the token's num_samples");
    int64_t last_end = 0;
    for (const ResumePiece& p : req.resume()) {
      if (p.begin() < last_end || p.end() <= p.begin() || p.end() > req.num_samples())
        return absl::InvalidArgumentError(StrCat("resume piece [", p.begin(), ", ", p.end(),
                                                 ") is not sorted, disjoint and "
                                                 "within the epoch's ",
                                                 req.num_samples(), " samples"));
      last_end = p.end();
      resume.push_back({p.begin(), p.end(), p.exact()});
    }
  }
  const std::string on_fall_behind =
      req.on_fall_behind().empty() ? "recompute" : req.on_fall_behind();
  if (on_fall_behind != "recompute" && on_fall_behind != "skip")
    return absl::InvalidArgumentError(
        StrCat("unknown on_fall_behind '", on_fall_behind, "': use 'recompute' or 'skip'"));
  if (req.cross_trainer_cache() &&
      (req.job_name().empty() || sharding != "dynamic" || req.num_consumers() > 0))
    return absl::InvalidArgumentError(
        "cross_trainer_cache needs a job_name (the trainers share the job by name), dynamic "
        "sharding and no num_consumers");
  if (sharding == "off" && req.num_consumers() > 0)
    return absl::InvalidArgumentError(
        "coordinated reads (num_consumers) need dynamic sharding: with sharding off every worker "
        "runs the whole pipeline, so rounds cannot be formed");
  absl::MutexLock lock(&mu_);
  if (auto id = state_.FindJobByName(req.job_name())) {
    const auto* job = state_.FindJob(*id);
    // Every consumer of a shared job must ask for the same job: name what differs.
    std::string diff;
    auto differs = [&](std::string_view what, const auto& theirs, const auto& ours) {
      if (theirs != ours && diff.empty())
        diff = StrCat(what, " (the job has ", theirs, ", this request ", ours, ")");
    };
    if (job->fingerprint != req.fingerprint()) diff = "the pipeline spec (fingerprint)";
    differs("sharding", job->sharding, sharding);
    differs("num_consumers", job->num_consumers, req.num_consumers());
    if (job->num_consumers > 0) differs("partial_round", job->partial_round, partial_round);
    differs("deterministic", std::string(job->deterministic ? "true" : "false"),
            std::string(req.deterministic() ? "true" : "false"));
    differs("first_epoch", job->first_epoch, req.first_epoch());
    differs("cross_trainer_cache", std::string(job->cross_trainer_cache ? "true" : "false"),
            std::string(req.cross_trainer_cache() ? "true" : "false"));
    if (job->cross_trainer_cache) differs("on_fall_behind", job->on_fall_behind, on_fall_behind);
    if (job->resumed || req.resuming()) {
      nlohmann::json theirs = nlohmann::json::array();
      for (const auto& p : job->resume) theirs.push_back({p.begin, p.end, p.exact});
      differs("resume point", job->resumed ? theirs.dump() : std::string("none"),
              req.resuming() ? resume.dump() : std::string("none"));
    }
    if (!diff.empty())
      return absl::AlreadyExistsError(
          StrCat("job '", req.job_name(), "' (", *id, ") runs with a different ", diff,
                 "; use the same parameters to share it, or another job name"));
    resp->set_job_id(*id);
    return absl::OkStatus();
  }
  if (!state_.datasets().count(req.fingerprint()))
    RETURN_IF_ERROR(Update({{"type", "register_dataset"},
                            {"fingerprint", req.fingerprint()},
                            {"spec", req.spec_json()}}));
  if (options_.max_jobs > 0) {
    int64_t running = 0;
    for (const auto& [other_id, other] : state_.jobs())
      if (other.ended.empty() && other.error.empty() && !state_.JobFinished(other)) ++running;
    if (running >= options_.max_jobs)
      return absl::ResourceExhaustedError(StrCat(
          "the dispatcher runs ", running, " jobs, the most its --max-jobs (", options_.max_jobs,
          ") allows; wait for jobs to finish or end, or restart it with a higher "
          "--max-jobs"));
  }
  int64_t id = state_.next_job_id();
  nlohmann::json create = {{"type", "create_job"},
                           {"job_id", id},
                           {"name", req.job_name()},
                           {"fingerprint", req.fingerprint()},
                           {"num_samples", req.num_samples()},
                           {"sharding", sharding},
                           {"compression", CompressionName(compression)},
                           {"num_epochs", num_epochs},
                           {"first_epoch", req.first_epoch()},
                           {"num_consumers", req.num_consumers()},
                           {"partial_round", partial_round},
                           {"deterministic", req.deterministic()}};
  if (req.cross_trainer_cache()) {
    create["cross_trainer_cache"] = true;
    create["on_fall_behind"] = on_fall_behind;
  }
  // Journaled with the job: replayed, it resumes at the same point.
  if (req.resuming()) create["resume"] = std::move(resume);
  RETURN_IF_ERROR(Update(create));
  job_unconsumed_since_[id] = Clock::now();
  SPDLOG_INFO("dispatcher: job {}{} created (sharding {}, epochs {} from {}{})", id,
              req.job_name().empty() ? "" : StrCat(" '", req.job_name(), "'"), sharding, num_epochs,
              req.first_epoch(),
              req.num_consumers() > 0 ? StrCat(", ", req.num_consumers(), " coordinated consumers")
                                      : std::string());
  resp->set_job_id(id);
  return absl::OkStatus();
}

absl::Status Dispatcher::WorkerHeartbeat(const WorkerHeartbeatRequest& req,
                                         WorkerHeartbeatResponse* resp) {
  SyncBeforeReply durable{journal_.get()};
  if (req.address().empty()) return absl::InvalidArgumentError("worker heartbeat without address");
  absl::MutexLock lock(&mu_);
  int64_t id = req.worker_id();
  if (req.leaving()) {
    if (state_.workers().count(id)) {
      SPDLOG_INFO("dispatcher: worker {} ({}) left", id, req.address());
      RecordEvent("info", StrCat("worker ", id, " (", req.address(), ") left"));
      RETURN_IF_ERROR(Update({{"type", "remove_worker"}, {"worker_id", id}}));
      last_heartbeat_.erase(id);
    }
    return absl::OkStatus();
  }
  if (id == 0 || !state_.workers().count(id)) {
    if (options_.max_registered_workers > 0 &&
        static_cast<int64_t>(state_.workers().size()) >= options_.max_registered_workers)
      return absl::ResourceExhaustedError(
          StrCat("the dispatcher has ", state_.workers().size(),
                 " workers registered, the most its --max-registered-workers (",
                 options_.max_registered_workers,
                 ") allows; restart it with a higher --max-registered-workers"));
    if (id != 0) SPDLOG_WARN("dispatcher: worker {} was lost; registering it again", id);
    id = state_.next_worker_id();
    RETURN_IF_ERROR(
        Update({{"type", "register_worker"}, {"worker_id", id}, {"address", req.address()}}));
    SPDLOG_INFO("dispatcher: worker {} joined at {}", id, req.address());
    RecordEvent("info", StrCat("worker ", id, " joined at ", req.address()));
  }
  last_heartbeat_[id] = Clock::now();
  worker_totals_[id] = {Finite(req.busy_seconds()), std::max<int64_t>(0, req.produced_elements())};
  std::set<int64_t> running(req.running_jobs().begin(), req.running_jobs().end());
  running_[id] = running;
  if (!req.unhealthy().empty() && !unhealthy_.count(id)) {
    SPDLOG_WARN("dispatcher: worker {} ({}) is unhealthy: {}; it gets no new tasks", id,
                req.address(), req.unhealthy());
    RecordEvent("warning", StrCat("worker ", id, " (", req.address(),
                                  ") is unhealthy: ", req.unhealthy(), "; it gets no new tasks"));
    unhealthy_[id] = req.unhealthy();
  } else if (req.unhealthy().empty()) {
    unhealthy_.erase(id);
  }
  if (req.failed_job() != 0) {
    const auto* job = state_.FindJob(req.failed_job());
    if (job != nullptr && job->error.empty())
      RETURN_IF_ERROR(
          Update({{"type", "job_error"},
                  {"job_id", req.failed_job()},
                  {"message", StrCat("worker ", req.address(), ": ", req.task_error())}}));
  }
  for (const JobSplits& o : req.orphaned()) {
    const auto* job = state_.FindJob(o.job_id());
    if (job == nullptr || o.split_ids().empty()) continue;
    json ids = json::array();
    for (int64_t split_id : o.split_ids()) ids.push_back(split_id);
    SPDLOG_INFO("dispatcher: job {}: {} splits of removed consumers are leased again", o.job_id(),
                ids.size());
    RETURN_IF_ERROR(
        Update({{"type", "requeue_splits"}, {"job_id", o.job_id()}, {"split_ids", ids}}));
  }
  resp->set_worker_id(id);
  ListTasks(id, running, resp);
  // Long poll: while the worker already runs exactly these tasks, hold the reply (up to wait_ms)
  // until an update may change them, so a new job reaches its workers at once.
  auto unchanged = [&] {
    std::set<int64_t> listed;
    for (const Task& t : resp->tasks()) listed.insert(t.job_id());
    return listed == running;
  };
  // Bounded well inside the worker timeout: the worker's next heartbeat follows the reply.
  int64_t max_wait_ms = options_.worker_timeout.count() / 3;
  auto deadline =
      absl::Now() + absl::Milliseconds(std::clamp<int64_t>(req.wait_ms(), 0, max_wait_ms));
  while (!stopping_ && unchanged() && absl::Now() < deadline) {
    int64_t version = tasks_version_;
    auto changed = [&] { return stopping_ || tasks_version_ != version; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&changed), deadline)) break;
    if (!state_.workers().count(id)) break;  // removed meanwhile: let it re-register
    resp->clear_tasks();
    ListTasks(id, running, resp);
  }
  return absl::OkStatus();
}

void Dispatcher::ListTasks(int64_t worker_id, const std::set<int64_t>& running,
                           WorkerHeartbeatResponse* resp) {
  // A worker needs only the consumers removed lately (it drops their streams once).
  constexpr size_t kRemovedClientsListed = 256;
  const bool unhealthy = unhealthy_.count(worker_id) > 0;
  for (const auto& [job_id, job] : state_.jobs()) {
    if (!job.error.empty() || !job.ended.empty() || state_.JobFinished(job)) continue;
    if (unhealthy && !running.count(job_id)) continue;
    Task* t = resp->add_tasks();
    t->set_job_id(job_id);
    t->set_spec_json(state_.datasets().at(job.fingerprint));
    t->set_sharding(job.sharding);
    t->set_compression(job.compression);
    t->set_num_epochs(job.num_epochs);
    t->set_first_epoch(job.first_epoch);
    t->set_num_consumers(job.num_consumers);
    t->set_partial_round(job.partial_round);
    t->set_cross_trainer_cache(job.cross_trainer_cache);
    t->set_on_fall_behind(job.on_fall_behind);
    t->set_needs_size(job.sharding == "dynamic" && job.num_samples == 0);
    for (int64_t index : job.departed) t->add_departed_consumers(index);
    size_t n = job.removed_clients.size();
    for (size_t i = n > kRemovedClientsListed ? n - kRemovedClientsListed : 0; i < n; ++i)
      t->add_removed_clients(job.removed_clients[i]);
  }
}

void Dispatcher::SetSplit(const DispatcherState::Job& job, int64_t split_id, int64_t begin,
                          int64_t end, GetSplitResponse* resp) const {
  int64_t epoch = begin / job.num_samples;
  if (job.num_consumers == 0) {
    for (int64_t client : job.clients) {
      auto held = held_splits_.find(client);
      if (held != held_splits_.end() && held->second.count(split_id)) {
        resp->set_owner_client_id(client);
        break;
      }
    }
  }
  resp->set_kind(GetSplitResponse::SPLIT);
  resp->set_split_id(split_id);
  resp->set_epoch(job.first_epoch + epoch);
  resp->set_begin(begin - epoch * job.num_samples);
  resp->set_end(end - epoch * job.num_samples);
}

absl::Status Dispatcher::GetSplit(const GetSplitRequest& req, GetSplitResponse* resp) {
  SyncBeforeReply durable{journal_.get()};
  absl::MutexLock lock(&mu_);
  const auto* job = state_.FindJob(req.job_id());
  if (job == nullptr) return absl::NotFoundError(StrCat("no job ", req.job_id()));
  if (!job->error.empty() || !job->ended.empty() || state_.JobFinished(*job)) {
    resp->set_kind(GetSplitResponse::END);
    return absl::OkStatus();
  }
  if (job->sharding == "dynamic" && req.num_samples() > 0 &&
      job->num_samples != req.num_samples()) {
    if (job->num_samples == 0) {
      RETURN_IF_ERROR(Update(
          {{"type", "set_job_size"}, {"job_id", job->id}, {"num_samples", req.num_samples()}}));
      SPDLOG_INFO("dispatcher: job {} has {} samples per epoch (counted by worker {})", job->id,
                  req.num_samples(), req.worker_id());
    } else {
      RETURN_IF_ERROR(
          Update({{"type", "job_error"},
                  {"job_id", job->id},
                  {"message", StrCat("worker ", req.worker_id(), " counts ", req.num_samples(),
                                     " samples per epoch but the job has ", job->num_samples,
                                     ": did the dataset change while the job ran?")}}));
      resp->set_kind(GetSplitResponse::END);
      return absl::OkStatus();
    }
  }
  if (job->num_samples == 0) {  // no worker has counted the samples yet
    resp->set_kind(GetSplitResponse::WAIT);
    return absl::OkStatus();
  }
  if (!state_.workers().count(req.worker_id())) {
    // A lost worker must re-register (its next heartbeat does) before it gets more work.
    resp->set_kind(GetSplitResponse::WAIT);
    return absl::OkStatus();
  }
  // A lease whose reply the worker never got (it names an older split) is given again.
  if (auto it = job->last_lease.find(req.worker_id());
      it != job->last_lease.end() && it->second != req.last_split_id()) {
    const auto& s = job->splits.at(it->second);
    if (!s.done && s.worker_id == req.worker_id()) {
      SetSplit(*job, it->second, s.begin, s.end, resp);
      return absl::OkStatus();
    }
  }
  if (!job->pending.empty()) {
    // Just restarted: consumers have not yet said which splits they hold (SetSplit).
    if (Clock::now() - started_ < options_.worker_timeout && !job->clients.empty()) {
      resp->set_kind(GetSplitResponse::WAIT);
      return absl::OkStatus();
    }
    int64_t split_id = job->pending.front();
    RETURN_IF_ERROR(Update({{"type", "lease_split"},
                            {"job_id", job->id},
                            {"split_id", split_id},
                            {"worker_id", req.worker_id()}}));
    const auto& s = job->splits.at(split_id);
    SPDLOG_INFO("dispatcher: job {} split {} (positions {} .. {}) leased again, to worker {} ({})",
                job->id, split_id, s.begin, s.end, req.worker_id(),
                state_.workers().at(req.worker_id()).address);
    SetSplit(*job, split_id, s.begin, s.end, resp);
    return absl::OkStatus();
  }
  if (job->next_sample < job->positions()) {
    int64_t n = std::clamp<int64_t>(req.wanted_samples(), 1, int64_t{1} << 24);
    int64_t begin = job->next_sample;
    int64_t epoch_end = (begin / job->num_samples + 1) * job->num_samples;  // never two epochs
    int64_t end = std::min(epoch_end, begin + n);
    if (const auto* piece = job->PieceAt(begin))  // a resumed job: within its pieces
      end = piece->exact ? piece->end : std::min(end, piece->end);
    int64_t split_id = state_.next_split_id(job->id);
    RETURN_IF_ERROR(Update({{"type", "create_split"},
                            {"job_id", job->id},
                            {"split_id", split_id},
                            {"begin", begin},
                            {"end", end},
                            {"worker_id", req.worker_id()}}));
    SetSplit(*job, split_id, begin, end, resp);
    return absl::OkStatus();
  }
  // Everything is handed out; leases still open may come back if their worker is lost.
  resp->set_kind(GetSplitResponse::WAIT);
  return absl::OkStatus();
}

absl::Status Dispatcher::ClientHeartbeat(const ClientHeartbeatRequest& req,
                                         ClientHeartbeatResponse* resp) {
  SyncBeforeReply durable{journal_.get()};
  absl::MutexLock lock(&mu_);
  const auto* job = state_.FindJob(req.job_id());
  if (job == nullptr)
    return absl::NotFoundError(StrCat("no job ", req.job_id(),
                                      " at this dispatcher (was its "
                                      "work dir removed?)"));
  int64_t client_id = req.client_id();
  if (client_id == 0) {
    if (req.leaving()) return absl::OkStatus();
    if (!job->ended.empty())
      return absl::FailedPreconditionError(
          StrCat("job ", job->id, " was ended (", job->ended, "); create a new job"));
    if (job->num_consumers > 0) {
      if (req.consumer_index() < 0 || req.consumer_index() >= job->num_consumers)
        return absl::InvalidArgumentError(
            StrCat("consumer_index ", req.consumer_index(), " is not 0 .. ", job->num_consumers - 1,
                   " (the job has ", job->num_consumers, " coordinated consumers)"));
      for (int64_t other : job->clients)
        if (state_.clients().at(other).consumer_index == req.consumer_index())
          return absl::AlreadyExistsError(StrCat("consumer index ", req.consumer_index(),
                                                 " of job ", job->id, " is taken by client ", other,
                                                 ", which is alive; give each consumer its own "
                                                 "index (with torch.distributed: its rank)"));
    } else if (job->cross_trainer_cache) {
      if (req.trainer_id().empty())
        return absl::InvalidArgumentError(
            StrCat("job ", job->id,
                   " has a cross-trainer cache: each consumer needs a trainer_id (stoker consume "
                   "--trainer-id, Python distribute(trainer_id=...))"));
      for (int64_t other : job->clients)
        if (state_.clients().at(other).trainer_id == req.trainer_id())
          return absl::AlreadyExistsError(StrCat("trainer id '", req.trainer_id(), "' of job ",
                                                 job->id, " is taken by client ", other,
                                                 ", which is alive; give each trainer its own id"));
    } else if (job->deterministic && !job->clients.empty()) {
      return absl::FailedPreconditionError(
          StrCat("job ", job->id,
                 " delivers in a deterministic order to one consumer and has one "
                 "(client ",
                 *job->clients.begin(),
                 "); several consumers need num_consumers "
                 "(coordinated reads) or deterministic false (stoker consume "
                 "--no-deterministic, Python distribute(deterministic=False))"));
    }
    if (options_.max_clients > 0 &&
        static_cast<int64_t>(state_.clients().size()) >= options_.max_clients)
      return absl::ResourceExhaustedError(
          StrCat("the dispatcher has ", state_.clients().size(),
                 " consumers, the most its --max-clients (", options_.max_clients,
                 ") allows; wait for consumers to leave, or restart it with a higher "
                 "--max-clients"));
    client_id = state_.next_client_id();
    RETURN_IF_ERROR(
        Update({{"type", "register_client"},
                {"client_id", client_id},
                {"job_id", job->id},
                {"consumer_index", job->num_consumers > 0 ? req.consumer_index() : 0},
                {"trainer_id", job->cross_trainer_cache ? req.trainer_id() : std::string()}}));
    job_unconsumed_since_.erase(job->id);
    SPDLOG_INFO("dispatcher: client {} joined job {}", client_id, job->id);
  } else if (!state_.clients().count(client_id)) {
    if (req.leaving()) return absl::OkStatus();
    return absl::FailedPreconditionError(StrCat("client ", client_id, " of job ", job->id,
                                                " was removed (it missed its heartbeats for ",
                                                options_.client_timeout.count() / 1000.0,
                                                " s, or left); what it held was given to others"));
  } else if (state_.clients().at(client_id).job_id != job->id) {
    return absl::InvalidArgumentError(StrCat("client ", client_id, " belongs to job ",
                                             state_.clients().at(client_id).job_id, ", not ",
                                             job->id));
  }
  client_seen_[client_id] = Clock::now();
  if (job->num_consumers == 0) {
    held_splits_[client_id] = {req.held_splits().begin(), req.held_splits().end()};
  }
  client_totals_[client_id] = {Finite(req.wait_seconds()), Finite(req.compute_seconds()),
                               std::max<int64_t>(0, req.delivered_elements())};
  resp->set_client_id(client_id);
  json acks = json::array();
  for (int64_t split_id : req.completed_splits()) {
    auto it = job->splits.find(split_id);
    if (it != job->splits.end() && !it->second.done) acks.push_back(split_id);
  }
  if (!acks.empty()) {
    json ack = {{"type", "ack_splits"}, {"job_id", job->id}, {"split_ids", acks}};
    if (job->num_consumers > 0)
      ack["consumer_index"] = state_.clients().at(client_id).consumer_index;
    if (job->cross_trainer_cache) ack["client_id"] = client_id;
    RETURN_IF_ERROR(Update(ack));
  }
  for (int64_t worker_id : req.ended_workers())
    if (state_.workers().count(worker_id) && !job->ended_workers.count(worker_id))
      RETURN_IF_ERROR(
          Update({{"type", "worker_ended"}, {"job_id", job->id}, {"worker_id", worker_id}}));
  if (req.leaving()) {
    RETURN_IF_ERROR(RemoveClient(client_id, kLeft));
    // The last consumer left before the end: nobody will read the rest, and a rerun under the
    // same name should start afresh rather than join a half-consumed job.
    if (job->clients.empty() && job->ended.empty() && !state_.JobFinished(*job)) {
      RETURN_IF_ERROR(
          Update({{"type", "end_job"}, {"job_id", job->id}, {"reason", "its last consumer left"}}));
    }
    return absl::OkStatus();
  }
  for (const auto& [id, w] : state_.workers()) {
    // An unhealthy worker serves only the jobs it already ran; with sharding off, its stream of
    // a job it does not run counts as consumed (empty), so the job can finish without it.
    if (unhealthy_.count(id) && !running_[id].count(job->id)) {
      if (job->sharding == "off" && !job->ended_workers.count(id))
        RETURN_IF_ERROR(Update({{"type", "worker_ended"}, {"job_id", job->id}, {"worker_id", id}}));
      continue;
    }
    WorkerInfo* info = resp->add_workers();
    info->set_worker_id(id);
    info->set_address(w.address);
  }
  resp->set_registered_workers(static_cast<int64_t>(state_.workers().size()));
  // A trainer of a cross-trainer cache job is done once it has acknowledged everything itself.
  resp->set_job_finished(state_.JobFinished(*job) ||
                         (job->cross_trainer_cache && job->FinishedFor(client_id)));
  resp->set_job_error(job->error.empty() && !job->ended.empty()
                          ? StrCat("the job was ended: ", job->ended)
                          : job->error);
  resp->set_num_samples(job->num_samples);
  resp->set_first_epoch(job->first_epoch);
  resp->set_num_epochs(job->num_epochs);
  resp->set_epochs_done(job->epochs_done(job->cross_trainer_cache ? client_id : 0));
  resp->set_splits_created(state_.next_split_id(job->id));
  resp->set_num_consumers(job->num_consumers);
  return absl::OkStatus();
}

}  // namespace stoker::service
