// The dispatcher's RPCs of running jobs (dispatcher.h): WorkerHeartbeat (registration, health,
// failed tasks, and the task list as a long poll), GetSplit (leasing splits: new ones, ones leased
// again after their worker or consumer was lost, and a lease whose reply was lost), and
// ClientHeartbeat (consumers joining, acknowledging splits, leaving), with RemoveClient, which both
// ClientHeartbeat and the peer monitor (dispatcher_monitor.cc) use.
#include <algorithm>
#include <cmath>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/service/common/modes_proto.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/dispatcher/durable_reply.h"

namespace stoker::service {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using dispatcher_internal::SyncBeforeReply;

// RemoveClient's reason for a consumer that said it leaves.
constexpr char kLeft[] = "left";

// The longest ClientHeartbeatRequest.registration_id kept (the client sends 32 hex digits).
constexpr size_t kMaxRegistrationId = 64;

// A reported total in seconds: 0 unless finite and not negative.
double Finite(double x) { return std::isfinite(x) && x > 0 ? x : 0; }

}  // namespace

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
  // A worker new to this process is measured from its first heartbeat, not from the next interval.
  worker_measured_.try_emplace(id, worker_totals_[id]);
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
    SetModes({.sharding = job.sharding,
              .compression = job.compression,
              .partial_round = job.partial_round,
              .on_fall_behind = job.on_fall_behind},
             t);
    t->set_num_epochs(job.num_epochs);
    t->set_first_epoch(job.first_epoch);
    t->set_num_consumers(job.num_consumers);
    t->set_cross_trainer_cache(job.cross_trainer_cache);
    t->set_needs_size(job.sharding == Sharding::kDynamic && job.num_samples == 0);
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
  if (job->sharding == Sharding::kDynamic && req.num_samples() > 0 &&
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
  if (req.registration_id().size() > kMaxRegistrationId)
    return absl::InvalidArgumentError(StrCat("registration_id of ", req.registration_id().size(),
                                             " bytes; at most ", kMaxRegistrationId));
  if (client_id == 0 && !req.registration_id().empty()) {
    // This consumer registered before and did not hear the reply (the dispatcher was killed
    // after journaling it, or the reply came after the deadline): its registration is given back.
    // Refusing it as a second consumer would end the consumer, or leave its place held by a
    // registration nobody reads until the client timeout (a coordinated job then fails).
    for (int64_t other : job->clients)
      if (state_.clients().at(other).registration_id == req.registration_id()) client_id = other;
  }
  if (client_id == 0) {
    if (req.leaving()) {
      // A consumer that leaves before its first heartbeat was answered: an anonymous job is its
      // own (nobody else can join it), so it ends now rather than after the client timeout.
      if (job->name.empty() && job->clients.empty() && !job->ever_had_client &&
          job->ended.empty() && job->error.empty() && !state_.JobFinished(*job))
        RETURN_IF_ERROR(Update(
            {{"type", "end_job"}, {"job_id", job->id}, {"reason", "its last consumer left"}}));
      return absl::OkStatus();
    }
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
    json registration = {
        {"type", "register_client"},
        {"client_id", client_id},
        {"job_id", job->id},
        {"consumer_index", job->num_consumers > 0 ? req.consumer_index() : 0},
        {"trainer_id", job->cross_trainer_cache ? req.trainer_id() : std::string()}};
    if (!req.registration_id().empty()) registration["registration_id"] = req.registration_id();
    RETURN_IF_ERROR(Update(registration));
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
  const ClientTotals& totals = client_totals_[client_id] = {
      Finite(req.wait_seconds()), Finite(req.compute_seconds()),
      std::max<int64_t>(0, req.delivered_elements()), Finite(req.first_wait_seconds())};
  // A consumer new to this process is measured from its first heartbeat; with an autoscaler, its
  // first look comes once it has read for first_look or delivered first_look_elements
  // (docs/operations.md, "Autoscaler").
  if (client_measured_.try_emplace(client_id, totals).second && autoscaler_ != nullptr) {
    first_look_due_[client_id] = Clock::now() + options_.autoscaler.first_look;
    // A pipeline read before: start its workers now, before the first look measures it.
    auto need = remembered_need_.find(job->fingerprint);
    if (need != remembered_need_.end()) {
      if (need->second.workers > remembered_start_) {
        remembered_start_ = need->second.workers;
        remembered_reason_ =
            StrCat("remembered: a job of pipeline ", job->fingerprint.substr(0, 12), " needed ",
                   need->second.workers, " workers when last read");
      }
    } else if (std::none_of(client_measured_.begin(), client_measured_.end(), [&](const auto& c) {
                 return c.first != client_id && state_.clients().count(c.first) &&
                        state_.clients().at(c.first).job_id == job->id;
               })) {
      // Its demand is unknown until the first look: start what can start at no cost.
      guess_reason_ =
          StrCat("guess: job ", job->id, " reads pipeline ", job->fingerprint.substr(0, 12),
                 ", never read before: its demand is unknown, the standby workers start at once");
    }
  }
  if (auto due = first_look_due_.find(client_id);
      due != first_look_due_.end() &&
      (Clock::now() >= due->second
           ? totals.elements > client_measured_[client_id].elements
           : totals.elements >=
                 client_measured_[client_id].elements + options_.autoscaler.first_look_elements)) {
    first_look_due_.erase(due);
    measure_now_ = true;
  }
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
  if (req.leaving()) return RemoveClient(client_id, kLeft);
  if (req.wait_ms() > 0) {
    AwaitWorkerChange(req, client_id);
    job = state_.FindJob(req.job_id());
    if (job == nullptr || !state_.clients().count(client_id))
      return absl::UnavailableError("the job or its consumer was removed meanwhile; try again");
  }
  for (const auto& [id, w] : state_.workers()) {
    // An unhealthy worker serves only the jobs it already ran; with sharding off, its stream of
    // a job it does not run counts as consumed (empty), so the job can finish without it.
    if (unhealthy_.count(id) && !running_[id].count(job->id)) {
      if (job->sharding == Sharding::kOff && !job->ended_workers.count(id))
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

void Dispatcher::AwaitWorkerChange(const ClientHeartbeatRequest& req, int64_t client_id) {
  std::set<int64_t> known(req.known_workers().begin(), req.known_workers().end());
  // The workers the reply would list (see ClientHeartbeat): all but the unhealthy ones that do
  // not run the job.
  auto served = [&](int64_t job_id) {
    std::set<int64_t> ids;
    for (const auto& [id, w] : state_.workers())
      if (auto r = running_.find(id);
          !unhealthy_.count(id) || (r != running_.end() && r->second.count(job_id)))
        ids.insert(id);
    return ids;
  };
  // Bounded well inside the client timeout, as a worker's wait.
  auto deadline = absl::Now() + absl::Milliseconds(std::clamp<int64_t>(
                                    req.wait_ms(), 0, options_.client_timeout.count() / 3));
  // The reply's other news: the job's size (once a worker counted it) and its epochs done.
  const auto* first = state_.FindJob(req.job_id());
  if (first == nullptr) return;
  const int64_t epochs_client = first->cross_trainer_cache ? client_id : 0;
  const auto news = [&](const auto& job) {
    return std::pair(job.num_samples, job.epochs_done(epochs_client));
  };
  const auto told = news(*first);
  while (!stopping_ && absl::Now() < deadline) {
    const auto* job = state_.FindJob(req.job_id());
    if (job == nullptr || !state_.clients().count(client_id) || state_.JobFinished(*job) ||
        !job->error.empty() || !job->ended.empty() || served(job->id) != known ||
        news(*job) != told)
      break;
    const int64_t version = updates_;
    auto changed = [&] { return stopping_ || updates_ != version; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&changed), deadline)) break;
  }
}

absl::Status Dispatcher::RemoveClient(int64_t client_id, const std::string& why) {
  const auto& client = state_.clients().at(client_id);
  const int64_t job_id = client.job_id;
  const int64_t index = client.consumer_index;
  // Judged before the removal: removing a coordinated job's consumer marks the splits every
  // other consumer acknowledged as done, so removing its only one would make it look finished.
  const auto* job = state_.FindJob(job_id);
  const bool running = job != nullptr && job->ended.empty() && !state_.JobFinished(*job);
  RETURN_IF_ERROR(Update({{"type", "remove_client"}, {"client_id", client_id}}));
  client_seen_.erase(client_id);
  held_splits_.erase(client_id);
  if (!running) return absl::OkStatus();
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
  // The last consumer left, or was removed, before the end: nobody will read the rest (its
  // workers would compute it for nothing until the client timeout), and a rerun under the same
  // name should start afresh rather than join a half-consumed job. A coordinated job that failed
  // above stays failed.
  if (job->clients.empty() && job->ended.empty() && job->error.empty() &&
      !state_.JobFinished(*job)) {
    RETURN_IF_ERROR(Update(
        {{"type", "end_job"},
         {"job_id", job_id},
         {"reason", why == kLeft ? std::string("its last consumer left")
                                 : StrCat("its last consumer (client ", client_id, ") ", why)}}));
  }
  return absl::OkStatus();
}

}  // namespace stoker::service
