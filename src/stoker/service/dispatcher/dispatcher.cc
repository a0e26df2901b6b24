// The dispatcher's core (dispatcher.h): Start (replaying the journal) and the destructor, the one
// way the state changes (Update: applied, journaled and counted under the mutex), the log of job
// transitions and events for the status page, and GetOrCreateJob (checking a request and creating
// or sharing a job). The other RPCs are in dispatcher_leases.cc, the background threads (peer
// liveness, load and the autoscaler, /metrics) in dispatcher_monitor.cc, the gRPC adapter in
// dispatcher_grpc.cc.
#include "stoker/service/dispatcher/dispatcher.h"

#include <cstdio>
#include <cstdlib>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/modes_proto.h"
#include "stoker/service/dispatcher/dispatcher_grpc.h"
#include "stoker/service/dispatcher/durable_reply.h"

namespace stoker::service {

namespace dispatcher_internal {

[[noreturn]] void StopOnJournalFailure(const absl::Status& s) {
  SPDLOG_CRITICAL(
      "dispatcher: the journal failed ({}); exiting so that a restart replays a "
      "consistent state",
      s.ToString());
  std::fflush(nullptr);
  std::abort();
}

}  // namespace dispatcher_internal

namespace {
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The longest GetOrCreateJobRequest.display_name accepted.
constexpr size_t kMaxDisplayName = 200;

// `s` with control characters (a display name comes from the client) replaced by '?'.
std::string Printable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}
using dispatcher_internal::StopOnJournalFailure;
using dispatcher_internal::SyncBeforeReply;
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
  d->service_ = NewDispatcherGrpcService(d.get(), d->security_.get());
  ASSIGN_OR_RETURN(d->server_, GrpcServer::Start(d->service_.get(), options.bind_address,
                                                 options.port, "dispatcher", *d->security_));
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

absl::Status Dispatcher::GetOrCreateJob(const GetOrCreateJobRequest& req,
                                        GetOrCreateJobResponse* resp) {
  SyncBeforeReply durable{journal_.get()};
  ASSIGN_OR_RETURN(const JobModes modes, ModesOf(req));
  const Sharding sharding = modes.sharding;
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
  // A resumed checkpoint: the pieces of the first epoch left to run (checked here so that a bad
  // request is an error for its sender, not a journal entry the state refuses).
  nlohmann::json resume = nlohmann::json::array();
  if (req.resuming()) {
    if (sharding != Sharding::kDynamic || req.num_samples() <= 0)
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
  if (req.cross_trainer_cache() &&
      (req.job_name().empty() || sharding != Sharding::kDynamic || req.num_consumers() > 0))
    return absl::InvalidArgumentError(
        "cross_trainer_cache needs a job_name (the trainers share the job by name), dynamic "
        "sharding and no num_consumers");
  if (req.display_name().size() > kMaxDisplayName)
    return absl::InvalidArgumentError(
        StrCat("display_name of ", req.display_name().size(), " bytes; at most ", kMaxDisplayName));
  if (sharding == Sharding::kOff && req.num_consumers() > 0)
    return absl::InvalidArgumentError(
        "coordinated reads (num_consumers) need dynamic sharding: with sharding off every worker "
        "runs the whole pipeline, so rounds cannot be formed");
  absl::MutexLock lock(&mu_);
  if (req.resuming() && req.replaces_job() > 0) {
    // The job the checkpoint was taken from: a resume replaces it. Its consumers were killed (a
    // rank killed with kill -9 leaves its job running without a consumer until the client
    // timeout) or moved on to this resume; ending it now frees its workers. Every rank of a
    // coordinated resume names it: the first ends it, the others find it ended.
    const auto* old = state_.FindJob(req.replaces_job());
    if (old != nullptr && old->ended.empty() && old->error.empty() && !state_.JobFinished(*old) &&
        old->fingerprint == req.fingerprint()) {
      RETURN_IF_ERROR(Update({{"type", "end_job"},
                              {"job_id", old->id},
                              {"reason", "a resume of its checkpoint replaces it"}}));
    }
  }
  if (auto id = state_.FindJobByName(req.job_name())) {
    const auto* job = state_.FindJob(*id);
    // Every consumer of a shared job must ask for the same job: name what differs.
    std::string diff;
    auto differs = [&](std::string_view what, const auto& theirs, const auto& ours) {
      if (theirs != ours && diff.empty())
        diff = StrCat(what, " (the job has ", theirs, ", this request ", ours, ")");
    };
    if (job->fingerprint != req.fingerprint()) diff = "the pipeline spec (fingerprint)";
    differs("sharding", ModeName(job->sharding), ModeName(sharding));
    differs("num_consumers", job->num_consumers, req.num_consumers());
    if (job->num_consumers > 0)
      differs("partial_round", ModeName(job->partial_round), ModeName(modes.partial_round));
    differs("deterministic", std::string(job->deterministic ? "true" : "false"),
            std::string(req.deterministic() ? "true" : "false"));
    differs("first_epoch", job->first_epoch, req.first_epoch());
    differs("cross_trainer_cache", std::string(job->cross_trainer_cache ? "true" : "false"),
            std::string(req.cross_trainer_cache() ? "true" : "false"));
    if (job->cross_trainer_cache)
      differs("on_fall_behind", ModeName(job->on_fall_behind), ModeName(modes.on_fall_behind));
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
                           {"sharding", ModeName(sharding)},
                           {"compression", ModeName(modes.compression)},
                           {"num_epochs", num_epochs},
                           {"first_epoch", req.first_epoch()},
                           {"num_consumers", req.num_consumers()},
                           {"partial_round", ModeName(modes.partial_round)},
                           {"deterministic", req.deterministic()},
                           {"display_name", Printable(req.display_name())},
                           {"created", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())}};
  if (req.open_ended()) create["open_ended"] = true;
  if (req.cross_trainer_cache()) {
    create["cross_trainer_cache"] = true;
    create["on_fall_behind"] = ModeName(modes.on_fall_behind);
  }
  // Journaled with the job: replayed, it resumes at the same point.
  if (req.resuming()) create["resume"] = std::move(resume);
  RETURN_IF_ERROR(Update(create));
  job_unconsumed_since_[id] = Clock::now();
  SPDLOG_INFO(
      "dispatcher: job {}{} created (sharding {}, epochs {}{} from {}{}{})", id,
      req.job_name().empty() ? "" : StrCat(" '", req.job_name(), "'"), ModeName(sharding),
      req.open_ended() ? "up to " : "", num_epochs, req.first_epoch(),
      req.num_consumers() > 0 ? StrCat(", ", req.num_consumers(), " coordinated consumers")
                              : std::string(),
      req.display_name().empty() ? std::string() : StrCat(", by ", Printable(req.display_name())));
  resp->set_job_id(id);
  return absl::OkStatus();
}

}  // namespace stoker::service
