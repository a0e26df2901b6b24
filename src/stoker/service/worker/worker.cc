// The worker's life cycle and its side of the dispatcher (worker.h): Start and the destructor,
// Drain (the graceful stop), the /metrics gauges, and HeartbeatLoop (the "worker-hb" thread:
// registration, load and failure reports, and the task list the reply brings: tasks started,
// consumers removed, tasks ended). Running a task's splits is in worker_produce.cc, serving its
// elements in worker_serve.cc, the gRPC adapter in worker_grpc.cc.
#include "stoker/service/worker/worker.h"

#include <grpcpp/grpcpp.h>
#include <malloc.h>

#include <algorithm>
#include <vector>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/common/modes_proto.h"
#include "stoker/service/worker/worker_grpc.h"

namespace stoker::service {
namespace {
using Clock = std::chrono::steady_clock;

}  // namespace

Worker::Worker(const WorkerOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Start(const WorkerOptions& options) {
  if (options.dispatcher_address.empty())
    return absl::InvalidArgumentError("a worker needs --dispatcher HOST:PORT");
  std::unique_ptr<Worker> w(new Worker(options));
  ASSIGN_OR_RETURN(w->security_, Security::Load(options.security));
  auto channel = w->security_->MakeChannel(options.dispatcher_address, Caller::kWorker);
  w->dispatcher_ = DispatcherService::NewStub(channel);
  w->service_ = NewWorkerGrpcService(w.get(), w->security_.get());
  ASSIGN_OR_RETURN(w->server_, GrpcServer::Start(w->service_.get(), options.bind_address,
                                                 options.port, "worker", *w->security_,
                                                 /*max_send_message_bytes=*/-1));
  w->port_ = w->server_->port();
  w->address_ = StrCat(options.host, ":", w->port_);
  if (options.before_register) {
    channel->GetState(/*try_to_connect=*/true);  // so the registration finds a connection
    RETURN_IF_ERROR(options.before_register());
  }
  w->heartbeat_ = StartThread("worker-hb", [p = w.get()] { p->HeartbeatLoop(); });
  w->metrics_collector_ = MetricsRegistry::Default().AddCollector(
      [p = w.get()](MetricsWriter& m) { p->CollectMetrics(m); });
  return w;
}

void Worker::CollectMetrics(MetricsWriter& w) {
  absl::MutexLock lock(&mu_);
  int64_t running = 0;
  for (const auto& [id, t] : tasks_) {
    if (t->cancelled) continue;
    ++running;
    w.Write("stoker_worker_buffered_bytes",
            "Bytes of encoded elements a task holds for its consumers (bounded by --buffer-bytes)",
            MetricsWriter::Type::kGauge, {{"job_id", std::to_string(id)}},
            static_cast<double>(t->buffered_bytes));
    if (t->cross_trainer)
      w.Write("stoker_worker_cache_window_bytes",
              "Cross-trainer cache: bytes of elements a task keeps for trainers behind the fastest "
              "(bounded by --cache-bytes)",
              MetricsWriter::Type::kGauge, {{"job_id", std::to_string(id)}},
              static_cast<double>(t->window_bytes - t->buffered_bytes));
  }
  w.Write("stoker_worker_tasks", "Tasks (jobs) this worker runs now", MetricsWriter::Type::kGauge,
          {}, static_cast<double>(running));
  int64_t streams = 0;
  for (const auto& [id, t] : tasks_)
    streams += static_cast<int64_t>(t->streams.size() + t->trainers.size());
  w.Write(
      "stoker_worker_client_streams",
      "Consumer streams the worker keeps, over all tasks (at most --max-clients-per-job a task)",
      MetricsWriter::Type::kGauge, {}, static_cast<double>(streams));
  w.Write("stoker_worker_healthy",
          "1 while healthy; 0 once --unhealthy-after tasks in a row failed (see /healthz)",
          MetricsWriter::Type::kGauge, {}, unhealthy_.empty() ? 1 : 0);
}

Worker::~Worker() {
  if (metrics_collector_ != 0) MetricsRegistry::Default().RemoveCollector(metrics_collector_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (server_) server_->Shutdown();
  if (heartbeat_.joinable()) heartbeat_.join();
  std::map<int64_t, std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(tasks_);
  }
  for (auto& [id, t] : tasks)
    if (t->thread.joinable()) t->thread.join();
}

void Worker::Drain(std::chrono::milliseconds timeout) {
  auto deadline = absl::Now() + absl::FromChrono(timeout);
  int64_t id = 0;
  std::chrono::milliseconds leave_timeout(2000);
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    for (auto& [job, t] : tasks_)
      if (t->sharding == Sharding::kOff) t->cancelled = true;
    // Every task's producer finished its split and every element it made was handed out and
    // acknowledged (the client asked past it). Heartbeats go on meanwhile, so the dispatcher
    // does not lease these splits to others. Without a dispatcher (stopped with this worker, or
    // restarting) only the producers are waited for: consumers could not acknowledge what they
    // received, and the dispatcher leases those splits again when it is back.
    auto drained = [&] {
      for (const auto& [job, t] : tasks_) {
        if (t->cancelled) continue;
        if (!t->producer_done) return false;
        if (dispatcher_unreachable_) continue;
        if (!t->unassigned.empty()) return false;
        if (t->cross_trainer && t->buffered_bytes > 0) return false;
        for (const auto& [key, stream] : t->streams)
          if (!stream.buffer.empty()) return false;
      }
      return true;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&drained), deadline))
      SPDLOG_WARN("worker {}: drain timed out; leaving with elements not yet received", address_);
    else if (dispatcher_unreachable_)
      SPDLOG_WARN(
          "worker {}: dispatcher {} is unreachable: leaving without waiting for consumers (their "
          "splits are leased again)",
          address_, options_.dispatcher_address);
    heartbeats_stopped_ = true;  // no heartbeat may follow the leaving one (it would re-register)
    if (heartbeat_call_ != nullptr) heartbeat_call_->TryCancel();  // a long poll: not waited for
    id = worker_id_;
    if (dispatcher_unreachable_) leave_timeout = std::chrono::milliseconds(500);
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  WorkerHeartbeatRequest req;
  req.set_worker_id(id);
  req.set_address(address_);
  req.set_leaving(true);
  WorkerHeartbeatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, leave_timeout);
  grpc::Status s = dispatcher_->WorkerHeartbeat(&ctx, req, &resp);
  if (!s.ok())
    SPDLOG_WARN(
        "worker {}: could not tell dispatcher {} it leaves ({}); it will notice the missed "
        "heartbeats",
        address_, options_.dispatcher_address, s.error_message());
}

void Worker::HeartbeatLoop() {
  auto backoff = options_.heartbeat_interval;
  Clock::time_point last_diagnosis{};  // of a failed heartbeat's cause (a probe: at most 1 s)
  while (true) {
    WorkerHeartbeatRequest req;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || heartbeats_stopped_) return;
      req.set_worker_id(worker_id_);
      req.set_unhealthy(unhealthy_);
      req.set_produced_elements(produced_total_);
      req.set_busy_seconds(static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9);
      if (!failures_.empty()) {
        req.set_failed_job(failures_.begin()->first);
        req.set_task_error(failures_.begin()->second);
      }
      for (const auto& [id, t] : tasks_) {
        if (!t->cancelled) req.add_running_jobs(id);
        if (!t->orphaned.empty()) {
          JobSplits* o = req.add_orphaned();
          o->set_job_id(id);
          for (int64_t split : t->orphaned) o->add_split_ids(split);
        }
      }
    }
    req.set_address(address_);
    req.set_wait_ms(options_.heartbeat_interval.count());
    WorkerHeartbeatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcTimeout + options_.heartbeat_interval);
    auto sent = Clock::now();
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || heartbeats_stopped_) return;
      heartbeat_call_ = &ctx;
    }
    grpc::Status s = dispatcher_->WorkerHeartbeat(&ctx, req, &resp);
    {
      absl::MutexLock lock(&mu_);
      heartbeat_call_ = nullptr;
      if (heartbeats_stopped_) return;  // Drain cancelled it; the leaving heartbeat follows
      // Unreachable: no answer, or the call failed for want of a connection (not a refusal
      // the dispatcher sent, which says it is there).
      dispatcher_unreachable_ = IsTransient(s) || s.error_code() == grpc::StatusCode::CANCELLED;
    }
    std::string why;  // a configuration mismatch behind a failure (TLS, plaintext), if any
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
        Clock::now() - last_diagnosis >= std::chrono::seconds(10)) {
      last_diagnosis = Clock::now();
      why = DiagnoseUnavailable(options_.dispatcher_address, *security_, s);
    }
    std::vector<std::thread> finished;
    {
      absl::MutexLock lock(&mu_);
      bool changed = false;  // the reply's task list differs from the one the request named
      if (!s.ok()) {
        if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
            s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          SPDLOG_ERROR("worker {}: dispatcher {} refused this worker: {}; retrying", address_,
                       options_.dispatcher_address, s.error_message());
        } else {
          if (!why.empty())
            SPDLOG_ERROR("worker {}: heartbeat to dispatcher {} failed: {}; retrying", address_,
                         options_.dispatcher_address, why);
          else
            SPDLOG_WARN("worker {}: heartbeat to dispatcher {} failed: {}; retrying", address_,
                        options_.dispatcher_address, s.error_message());
        }
      } else {
        if (worker_id_ != resp.worker_id())
          SPDLOG_INFO("worker {}: registered as worker {}", address_, resp.worker_id());
        worker_id_ = resp.worker_id();
        failures_.erase(req.failed_job());
        for (const JobSplits& o : req.orphaned()) {  // the dispatcher has them now
          auto it = tasks_.find(o.job_id());
          if (it == tasks_.end()) continue;
          std::set<int64_t> sent(o.split_ids().begin(), o.split_ids().end());
          std::erase_if(it->second->orphaned, [&](int64_t id) { return sent.count(id) > 0; });
        }
        std::set<int64_t> listed;
        for (const stoker::service::Task& t : resp.tasks()) {
          listed.insert(t.job_id());
          if (auto it = tasks_.find(t.job_id()); it != tasks_.end()) {
            it->second->needs_size = t.needs_size();
            DropRemovedClients(it->second.get(), t);
            continue;
          }
          absl::StatusOr<JobModes> modes = ModesOf(t);
          if (!modes.ok()) {  // a dispatcher of a later version: this worker cannot run it
            failures_[t.job_id()] =
                StrCat("worker ", address_, ": job ", t.job_id(), ": ", modes.status().message());
            continue;
          }
          auto task = std::make_shared<Worker::Task>();
          task->job_id = t.job_id();
          task->spec = t.spec_json();
          task->sharding = modes->sharding;
          task->compression = modes->compression;
          task->num_epochs = std::max<int64_t>(1, t.num_epochs());
          task->first_epoch = std::max<int64_t>(0, t.first_epoch());
          task->num_consumers = std::max<int64_t>(0, t.num_consumers());
          task->pad_rounds = modes->partial_round == PartialRound::kPad;
          task->needs_size = t.needs_size();
          task->cross_trainer = t.cross_trainer_cache();
          task->skip_behind = modes->on_fall_behind == OnFallBehind::kSkip;
          MetricsRegistry& metrics = MetricsRegistry::Default();
          const MetricLabels job = {{"job_id", std::to_string(t.job_id())}};
          task->produced_elements = &metrics.GetCounter("stoker_worker_produced_elements_total",
                                                        "Elements a worker's tasks produced", job);
          task->produced_bytes =
              &metrics.GetCounter("stoker_worker_produced_bytes_total",
                                  "Encoded (and compressed) payload bytes produced", job);
          task->busy_seconds = &metrics.GetCounter(
              "stoker_worker_busy_seconds_total",
              "Time a task waited on its pipeline for elements (not for buffer room or splits)",
              job);
          task->splits_done = &metrics.GetCounter("stoker_worker_splits_total",
                                                  "Splits a worker processed in full", job);
          if (task->cross_trainer) {
            task->cache_hits = &metrics.GetCounter(
                "stoker_worker_cache_hits_total",
                "Cross-trainer cache: elements sent to a trainer from the window", job);
            task->cache_misses = &metrics.GetCounter(
                "stoker_worker_cache_misses_total",
                "Cross-trainer cache: elements a trainer asked for after they left the window "
                "(then recomputed or skipped)",
                job);
            task->cache_recomputed = &metrics.GetCounter(
                "stoker_worker_cache_recomputed_total",
                "Cross-trainer cache: elements the pipeline produced again for a trainer behind "
                "the window (including those of its split before the first one it missed)",
                job);
            task->cache_skipped = &metrics.GetCounter(
                "stoker_worker_cache_skipped_total",
                "Cross-trainer cache (on_fall_behind skip): elements a trainer never got", job);
          }
          DropRemovedClients(task.get(), t);
          Worker::Task* raw = task.get();
          tasks_[t.job_id()] = std::move(task);
          raw->thread = StartThread(StrCat("task-", t.job_id()), [this, raw] { RunTask(raw); });
        }
        changed = listed != std::set<int64_t>(req.running_jobs().begin(), req.running_jobs().end());
        // A job no longer listed is finished (or failed): its consumer has everything.
        for (auto it = tasks_.begin(); it != tasks_.end();) {
          if (listed.count(it->first)) {
            ++it;
            continue;
          }
          it->second->cancelled = true;
          if (it->second->producer_done) {
            finished.push_back(std::move(it->second->thread));
            it = tasks_.erase(it);
          } else {
            ++it;
          }
        }
      }
      // After a change of tasks, heartbeat again at once (the next call is held until the next
      // change); otherwise wait out the interval (nothing if the dispatcher held the call that
      // long), or the back-off after an error.
      auto elapsed = Clock::now() - sent;
      auto wait = !s.ok()   ? backoff
                  : changed ? std::chrono::milliseconds(2) - elapsed  // never a busy loop
                            : options_.heartbeat_interval - elapsed;
      auto stop = [&] { return stopping_ || heartbeats_stopped_; };
      if (wait > Clock::duration::zero())
        mu_.AwaitWithTimeout(absl::Condition(&stop), absl::FromChrono(wait));
    }
    for (auto& t : finished) t.join();
    // A job ended here: give the memory of its buffers back to the system (large buffers are
    // kept on the heap, see main.cc, so freeing them alone would not shrink the process).
    if (!finished.empty()) malloc_trim(0);
  }
}

void Worker::DropRemovedClients(Task* task, const stoker::service::Task& listed) {
  // Coordinated: a consumer that left gets no more rounds (the others must not wait behind its
  // full stream).
  for (int64_t index : listed.departed_consumers()) {
    if (!task->departed.insert(index).second) continue;
    auto it = task->streams.find(index);
    if (it == task->streams.end()) continue;
    for (const Buffered& b : it->second.buffer)
      task->buffered_bytes -= static_cast<int64_t>(b.payload.size) + 64;
    task->streams.erase(it);
  }
  for (int64_t client : listed.removed_clients()) {
    if (!task->removed_clients.insert(client).second) continue;
    ForgetSharedMemory(task, client);
    if (task->num_consumers > 0) continue;  // by consumer index, below
    if (task->cross_trainer) {              // every trainer reads everything: nothing to give back
      task->trainers.erase(client);
      continue;
    }
    auto it = task->streams.find(client);
    if (it == task->streams.end()) continue;
    for (const Buffered& b : it->second.buffer)
      task->buffered_bytes -= static_cast<int64_t>(b.payload.size) + 64;
    for (int64_t split : it->second.splits) {
      task->owner.erase(split);
      task->dropped_splits.insert(split);
      task->orphaned.push_back(split);
    }
    SPDLOG_INFO(
        "worker {}: job {}: consumer {} was removed; its {} splits go back to the "
        "dispatcher",
        address_, task->job_id, client, it->second.splits.size());
    task->streams.erase(it);
  }
}

std::string Worker::unhealthy_reason() const {
  absl::MutexLock lock(&mu_);
  return unhealthy_;
}

}  // namespace stoker::service
