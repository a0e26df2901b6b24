#include "stoker/service/worker/worker.h"

#include <grpcpp/grpcpp.h>
#include <malloc.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/to_device.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/elements_response.h"
#include "stoker/service/common/grpc_util.h"

namespace stoker::service {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRpcTimeout = std::chrono::seconds(5);

// The gRPC adapter. GetElements is registered by hand with a ByteBuffer response (the generated
// service would serialize a protobuf message, copying every payload): the worker builds the
// serialized reply itself, referencing its buffered payloads (elements_response.h).
class GrpcWorker final : public grpc::Service {
 public:
  GrpcWorker(stoker::service::Worker* w, const Security* security) : w_(w), security_(security) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/stoker.service.WorkerService/GetElements", grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<GrpcWorker, GetElementsRequest, grpc::ByteBuffer,
                                             grpc::protobuf::MessageLite, grpc::ByteBuffer>(
            [](GrpcWorker* service, grpc::ServerContext* ctx, const GetElementsRequest* req,
               grpc::ByteBuffer* resp) {
              if (auto s =
                      service->security_->Check(*ctx, Caller::kClient, "worker", "GetElements");
                  !s.ok())
                return s;
              return ToGrpc(service->w_->GetElements(*req, resp));
            },
            this)));
  }

 private:
  stoker::service::Worker* w_;
  const Security* security_;
};

// The batch size of the spec's batch op (1 without one): splits are a multiple of it, so that a
// split's last batch is full (drop_remainder would otherwise drop samples at every split's end).
int64_t BatchSize(const nlohmann::json& spec) {
  if (!spec.contains("ops") || !spec["ops"].is_array()) return 1;
  for (const auto& op : spec["ops"])
    if (op.value("op", "") == "batch" && op.contains("size") && op["size"].is_number_integer())
      return std::max<int64_t>(1, op["size"].get<int64_t>());
  return 1;
}

// Coordinated reads with bucket_by_length: the bucket of a batch, so that a round's batches come
// from one bucket. -1 when the spec has no such op (every batch in one group).
struct BucketRule {
  std::string field;
  std::vector<int64_t> boundaries;
  int64_t BucketOf(const data::Element& e) const {
    if (field.empty()) return -1;
    auto t = e.Field(field);
    if (!t.ok() || (*t)->shape.size() < 2) return -1;
    int64_t length = (*t)->shape[1];  // the batch is padded to its longest sample
    return std::upper_bound(boundaries.begin(), boundaries.end(), length) - boundaries.begin();
  }
};

BucketRule BucketRuleOf(const nlohmann::json& spec) {
  BucketRule rule;
  if (!spec.contains("ops") || !spec["ops"].is_array()) return rule;
  for (const auto& op : spec["ops"]) {
    if (op.value("op", "") != "bucket_by_length" || !op.contains("field") ||
        !op["field"].is_string() || !op.contains("boundaries") || !op["boundaries"].is_array())
      continue;
    rule.field = op["field"].get<std::string>();
    for (const auto& b : op["boundaries"])
      if (b.is_number_integer()) rule.boundaries.push_back(b.get<int64_t>());
  }
  return rule;
}

}  // namespace

Worker::Worker(const WorkerOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Start(const WorkerOptions& options) {
  if (options.dispatcher_address.empty())
    return absl::InvalidArgumentError("a worker needs --dispatcher HOST:PORT");
  std::unique_ptr<Worker> w(new Worker(options));
  ASSIGN_OR_RETURN(w->security_, Security::Load(options.security));
  w->dispatcher_ = DispatcherService::NewStub(
      w->security_->MakeChannel(options.dispatcher_address, Caller::kWorker));
  w->service_ = std::make_unique<GrpcWorker>(w.get(), w->security_.get());
  ASSIGN_OR_RETURN(w->server_,
                   GrpcServer::Start(w->service_.get(), options.port, "worker", *w->security_,
                                     /*max_send_message_bytes=*/-1));
  w->port_ = w->server_->port();
  w->address_ = StrCat(options.host, ":", w->port_);
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
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    for (auto& [job, t] : tasks_)
      if (t->sharding == "off") t->cancelled = true;
    // Every task's producer finished its split and every element it made was handed out and
    // acknowledged (the client asked past it). Heartbeats go on meanwhile, so the dispatcher
    // does not lease these splits to others.
    auto drained = [&] {
      for (const auto& [job, t] : tasks_) {
        if (t->cancelled) continue;
        if (!t->producer_done || !t->unassigned.empty()) return false;
        if (t->cross_trainer && t->buffered_bytes > 0) return false;
        for (const auto& [key, stream] : t->streams)
          if (!stream.buffer.empty()) return false;
      }
      return true;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&drained), deadline))
      SPDLOG_WARN("worker {}: drain timed out; leaving with elements not yet received", address_);
    heartbeats_stopped_ = true;  // no heartbeat may follow the leaving one (it would re-register)
    id = worker_id_;
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  WorkerHeartbeatRequest req;
  req.set_worker_id(id);
  req.set_address(address_);
  req.set_leaving(true);
  WorkerHeartbeatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, std::chrono::seconds(2));
  grpc::Status s = dispatcher_->WorkerHeartbeat(&ctx, req, &resp);
  if (!s.ok())
    SPDLOG_WARN(
        "worker {}: could not tell dispatcher {} it leaves ({}); it will notice the missed "
        "heartbeats",
        address_, options_.dispatcher_address, s.error_message());
}

void Worker::AddBusy(Task* task, Clock::duration d) {
  task->busy_seconds->Increment(std::chrono::duration<double>(d).count());
  busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                     std::memory_order_relaxed);
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
    grpc::Status s = dispatcher_->WorkerHeartbeat(&ctx, req, &resp);
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
          auto task = std::make_shared<Worker::Task>();
          task->job_id = t.job_id();
          task->spec = t.spec_json();
          task->sharding = t.sharding();
          task->compression = ParseCompression(t.compression()).value_or(Compression::kNone);
          task->num_epochs = std::max<int64_t>(1, t.num_epochs());
          task->first_epoch = std::max<int64_t>(0, t.first_epoch());
          task->num_consumers = std::max<int64_t>(0, t.num_consumers());
          task->pad_rounds = t.partial_round() == "pad";
          task->needs_size = t.needs_size();
          task->cross_trainer = t.cross_trainer_cache();
          task->skip_behind = t.on_fall_behind() == "skip";
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

namespace {

// Whether a failed task says something about this worker (it could not reach, open or afford the
// data: NotFound, PermissionDenied, Unavailable, ...) rather than about the job (a spec or sample
// that is wrong wherever it runs: InvalidArgument, DataLoss, ...). Only the former count towards
// --unhealthy-after: a run of bad jobs must not take a sound worker out of service.
bool CountsAgainstWorker(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return false;
    default:
      return true;
  }
}
}  // namespace

void Worker::RunTask(Task* task) {
  absl::Status s = task->sharding == "off" ? RunWholePipeline(task) : RunDynamic(task);
  absl::MutexLock lock(&mu_);
  if (!s.ok() && !Stopped(task)) {
    SPDLOG_ERROR("worker {}: job {} failed: {}", address_, task->job_id, s.ToString());
    failures_[task->job_id] = std::string(s.message());
    static Counter& failed = MetricsRegistry::Default().GetCounter(
        "stoker_worker_task_failures_total", "Tasks that failed on this worker");
    failed.Increment();
    const int n = options_.unhealthy_after_failures;
    if (CountsAgainstWorker(s) && ++consecutive_failures_ >= n && n > 0 && unhealthy_.empty()) {
      unhealthy_ =
          StrCat(n, " tasks in a row failed; the last, of job ", task->job_id, ": ", s.message());
      SPDLOG_ERROR("worker {}: unhealthy: {}; it takes no new task until restarted", address_,
                   unhealthy_);
    }
  } else if (s.ok() && !Stopped(task)) {
    consecutive_failures_ = 0;
  }
  task->producer_done = true;
}

void Worker::Append(Task* task, Stream* stream, Buffered b) {
  b.meta.set_index(stream->next_index++);
  if (stream->buffer.empty()) stream->first_index = b.meta.index();
  stream->buffer.push_back(std::move(b));
}

bool Worker::AssignSplit(Task* task, int64_t client, Stream* stream) {
  if (task->unassigned.empty()) return false;
  auto it = task->unassigned.begin();  // the oldest split: the job's order where possible
  int64_t split = it->first;
  task->owner[split] = client;
  stream->splits.push_back(split);
  for (Buffered& b : it->second.elements) Append(task, stream, std::move(b));
  task->unassigned.erase(it);
  return true;
}

bool Worker::Push(Task* task, ElementData meta, EncodedElement payload, int64_t stream) {
  int64_t size = static_cast<int64_t>(payload.size) + 64;
  absl::MutexLock lock(&mu_);
  auto room = [&] {
    return Stopped(task) || task->buffered_bytes == 0 ||
           task->buffered_bytes + size <= options_.buffer_bytes;
  };
  mu_.Await(absl::Condition(&room));
  if (Stopped(task)) return false;
  if (!meta.empty()) {
    task->produced_elements->Increment();
    ++produced_total_;
    task->produced_bytes->Increment(static_cast<double>(payload.size));
  }
  const int64_t split = meta.split_id();
  Buffered b{std::move(meta), std::move(payload)};
  if (task->cross_trainer) {
    task->buffered_bytes += size;
    AppendToLog(task, std::move(b));
    return true;
  }
  if (stream >= 0) {
    if (task->departed.count(stream)) return true;  // that consumer left
    task->buffered_bytes += size;
    Append(task, &task->streams[stream], std::move(b));
    return true;
  }
  if (task->dropped_splits.count(split)) return true;  // its consumer was removed
  task->buffered_bytes += size;
  if (auto owner = task->owner.find(split); owner != task->owner.end()) {
    Append(task, &task->streams[owner->second], std::move(b));
  } else {
    task->unassigned[split].elements.push_back(std::move(b));
  }
  return true;
}

// The task's pipeline. A spec ending with to_device is refused: that op hands batches over in the
// consumer's GPU memory, so only the consumer can run it (ServiceClient sends specs without it).
static absl::StatusOr<std::shared_ptr<const data::Pipeline>> TaskPipeline(
    const std::string& spec, const data::PluginPolicy& plugins) {
  nlohmann::json parsed = nlohmann::json::parse(spec, nullptr, /*allow_exceptions=*/false);
  const data::DeviceSplit split = data::SplitDeviceOp(parsed);
  if (!split.device_op.is_null()) {
    return absl::FailedPreconditionError(
        StrCat("$.ops[", split.op_index,
               "]: to_device runs at the consumer, not on a worker (a worker's batches go over the "
               "network, not to its own GPU); the stoker service client strips it from the spec it "
               "sends and applies it to the batches it receives"));
  }
  return data::Pipeline::FromString(spec, plugins);
}

absl::Status Worker::RunWholePipeline(Task* task) {
  ASSIGN_OR_RETURN(auto pipeline,
                   TaskPipeline(task->spec, data::PluginPolicy::OnlyFrom(options_.plugin_dirs)));
  int64_t seq = 0;
  for (int64_t epoch = task->first_epoch; epoch < task->first_epoch + task->num_epochs; ++epoch) {
    auto it = pipeline->MakeIterator(epoch, options_.threads);
    while (true) {
      auto busy_from = Clock::now();
      absl::StatusOr<std::optional<data::Element>> next = it->GetNext();
      AddBusy(task, Clock::now() - busy_from);
      ASSIGN_OR_RETURN(std::optional<data::Element> e, std::move(next));
      if (!e) break;
      ElementData d;
      d.set_split_id(-1);
      d.set_sequence(seq++);
      d.set_epoch(epoch);
      if (!Push(task, std::move(d), EncodeElementPieces(*e, task->compression)))
        return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

bool Worker::PushRounds(Task* task, const GetSplitResponse& split,
                        std::vector<std::pair<EncodedElement, int64_t>> elements) {
  const int64_t n = task->num_consumers;
  // Group the split's batches by bucket (in order of first appearance), then deal each group out
  // in rounds of n; a group's last, incomplete round is dropped, or padded with the group's first
  // batches again.
  std::vector<int64_t> order;
  std::map<int64_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < elements.size(); ++i) {
    auto [it, inserted] = groups.try_emplace(elements[i].second);
    if (inserted) order.push_back(elements[i].second);
    it->second.push_back(i);
  }
  std::vector<std::vector<size_t>> rounds;
  int64_t dropped = 0;
  for (int64_t key : order) {
    const std::vector<size_t>& g = groups[key];
    size_t full = g.size() / n * n;
    for (size_t i = 0; i < full; i += n) rounds.emplace_back(g.begin() + i, g.begin() + i + n);
    if (full == g.size()) continue;
    if (!task->pad_rounds) {
      dropped += static_cast<int64_t>(g.size() - full);
      continue;
    }
    std::vector<size_t> round(g.begin() + full, g.end());
    for (size_t i = 0; round.size() < static_cast<size_t>(n); ++i) round.push_back(g[i % g.size()]);
    rounds.push_back(std::move(round));
  }
  if (dropped > 0)
    SPDLOG_DEBUG("worker {}: job {} split {}: {} batches dropped (an incomplete round)", address_,
                 task->job_id, split.split_id(), dropped);
  for (int64_t consumer = 0; consumer < n; ++consumer) {
    if (rounds.empty()) {  // nothing for anyone: only mark the end of the split
      ElementData d;
      d.set_split_id(split.split_id());
      d.set_epoch(split.epoch());
      d.set_begin(split.begin());
      d.set_end(split.end());
      d.set_last(true);
      d.set_empty(true);
      if (!Push(task, std::move(d), EncodedElement(), consumer)) return false;
    }
  }
  for (size_t r = 0; r < rounds.size(); ++r) {
    for (int64_t consumer = 0; consumer < n; ++consumer) {
      ElementData d;
      d.set_split_id(split.split_id());
      d.set_epoch(split.epoch());
      d.set_begin(split.begin());
      d.set_end(split.end());
      d.set_sequence(static_cast<int64_t>(r));
      d.set_last(r + 1 == rounds.size());
      if (!Push(task, std::move(d), elements[rounds[r][consumer]].first, consumer)) return false;
    }
  }
  return true;
}

absl::Status Worker::RunDynamic(Task* task) {
  ASSIGN_OR_RETURN(auto pipeline,
                   TaskPipeline(task->spec, data::PluginPolicy::OnlyFrom(options_.plugin_dirs)));
  {
    absl::MutexLock lock(&mu_);
    task->pipeline = pipeline;
  }
  const std::optional<int64_t> size = pipeline->source_size();
  if (!size)
    return absl::InvalidArgumentError(
        "dynamic sharding needs a pipeline over an indexed source (a dataset, range or memory "
        "source); use sharding 'off' for streams");
  if (*size <= 0)
    return absl::InvalidArgumentError("the pipeline's source has no sample: nothing to shard");
  const int64_t batch = BatchSize(pipeline->spec());
  const BucketRule buckets = BucketRuleOf(pipeline->spec());
  // Coordinated splits hold whole rounds: a multiple of num_consumers batches.
  const int64_t unit = batch * std::max<int64_t>(1, task->num_consumers);
  int64_t wanted = std::max<int64_t>(unit, 16);
  int64_t last_split_id = -1;
  while (true) {
    GetSplitRequest req;
    {
      absl::MutexLock lock(&mu_);
      auto room = [&] { return Stopped(task) || task->buffered_bytes < options_.buffer_bytes / 2; };
      mu_.Await(absl::Condition(&room));
      if (Stopped(task) || draining_) return absl::OkStatus();
      req.set_worker_id(worker_id_);
    }
    req.set_job_id(task->job_id);
    req.set_last_split_id(last_split_id);
    req.set_wanted_samples((wanted + unit - 1) / unit * unit);
    req.set_num_samples(*size);
    GetSplitResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcTimeout);
    grpc::Status s = dispatcher_->GetSplit(&ctx, req, &resp);
    if (!s.ok() || resp.kind() == GetSplitResponse::WAIT || req.worker_id() == 0) {
      if (!s.ok() && s.error_code() == grpc::StatusCode::NOT_FOUND)
        return FromGrpc(s, StrCat("GetSplit from dispatcher ", options_.dispatcher_address));
      absl::MutexLock lock(&mu_);
      auto stopped = [&] { return Stopped(task); };
      mu_.AwaitWithTimeout(absl::Condition(&stopped), absl::Milliseconds(s.ok() ? 50 : 200));
      continue;
    }
    if (resp.kind() == GetSplitResponse::END) return absl::OkStatus();
    last_split_id = resp.split_id();
    {
      // A split leased again after its consumer was removed may come back here: run it afresh.
      absl::MutexLock lock(&mu_);
      task->dropped_splits.erase(resp.split_id());
      task->owner.erase(resp.split_id());
      // A split leased again that a consumer holds in part goes to that consumer only.
      const int64_t owner = resp.owner_client_id();
      if (owner != 0 && task->num_consumers == 0 && !task->removed_clients.count(owner)) {
        task->owner[resp.split_id()] = owner;
        task->streams[owner].splits.push_back(resp.split_id());
      }
    }
    // Process the split through a fresh iterator, so that its elements are exactly its samples.
    auto start = Clock::now();
    data::SingleSplit provider({resp.begin(), resp.end()});
    auto it = pipeline->MakeIterator(resp.epoch(), options_.threads, &provider);
    std::optional<data::Element> prev;
    int64_t seq = 0;
    std::vector<std::pair<EncodedElement, int64_t>> round_elements;  // coordinated
    auto push = [&](const data::Element* e, bool last) {
      ElementData d;
      d.set_split_id(resp.split_id());
      d.set_sequence(seq++);
      d.set_last(last);
      d.set_empty(e == nullptr);
      d.set_epoch(resp.epoch());
      d.set_begin(resp.begin());
      d.set_end(resp.end());
      return Push(task, std::move(d),
                  e == nullptr ? EncodedElement() : EncodeElementPieces(*e, task->compression));
    };
    while (true) {
      auto busy_from = Clock::now();
      auto next = it->GetNext();
      AddBusy(task, Clock::now() - busy_from);
      if (!next.ok())
        return Annotate(next.status(), StrCat("job ", task->job_id, " split ", resp.split_id(),
                                              " [", resp.begin(), ", ", resp.end(), ")"));
      if (!next->has_value()) break;
      if (task->num_consumers > 0) {
        int64_t bucket = buckets.BucketOf(**next);
        round_elements.emplace_back(EncodeElementPieces(**next, task->compression), bucket);
        continue;
      }
      if (prev && !push(&*prev, false)) return absl::OkStatus();
      prev = std::move(**next);
    }
    if (task->num_consumers > 0) {
      if (!PushRounds(task, resp, std::move(round_elements))) return absl::OkStatus();
    } else if (!push(prev ? &*prev : nullptr, true)) {
      return absl::OkStatus();
    }
    task->splits_done->Increment();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    double per_second = (resp.end() - resp.begin()) / std::max(seconds, 1e-4);
    double target = std::chrono::duration<double>(options_.split_target).count();
    wanted = std::clamp<int64_t>(static_cast<int64_t>(per_second * target), 1, wanted * 4);
  }
}

absl::Status Worker::GetElements(const GetElementsRequest& req, grpc::ByteBuffer* resp) {
  if (req.next_index() < 0)
    return absl::InvalidArgumentError(
        StrCat("GetElements: negative next_index ", req.next_index()));
  {
    std::shared_ptr<Task> trainers_task;
    {
      absl::MutexLock lock(&mu_);
      auto known = [&] { return stopping_ || tasks_.count(req.job_id()) > 0; };
      mu_.AwaitWithTimeout(absl::Condition(&known), absl::Milliseconds(50));
      auto it = tasks_.find(req.job_id());
      if (it != tasks_.end() && it->second->cross_trainer) trainers_task = it->second;
    }
    if (trainers_task) return GetTrainerElements(std::move(trainers_task), req, resp);
  }
  const int64_t max_bytes = req.max_bytes() > 0 ? req.max_bytes() : int64_t{8} << 20;
  std::vector<Buffered> copies;  // taken under the lock (cheap: metadata and a reference)
  bool end_of_stream = false;
  int64_t stream_end = -1;
  {
    absl::MutexLock lock(&mu_);
    // A job this worker has not started yet (its heartbeat reply is on the way): wait a little.
    auto known = [&] { return stopping_ || tasks_.count(req.job_id()) > 0; };
    mu_.AwaitWithTimeout(absl::Condition(&known), absl::Milliseconds(50));
    auto it = tasks_.find(req.job_id());
    if (it != tasks_.end()) {
      std::shared_ptr<Task> task = it->second;  // outlives a removal while we wait below
      if (task->removed_clients.count(req.client_id()))
        return absl::FailedPreconditionError(
            StrCat("worker ", address_, ": client ", req.client_id(), " of job ", task->job_id,
                   " was removed by the dispatcher (it missed its heartbeats)"));
      int64_t key = req.client_id();
      if (task->num_consumers > 0) {
        if (req.consumer_index() < 0 || req.consumer_index() >= task->num_consumers)
          return absl::InvalidArgumentError(StrCat("GetElements: consumer_index ",
                                                   req.consumer_index(), " is not 0 .. ",
                                                   task->num_consumers - 1));
        key = req.consumer_index();
      } else if (task->sharding == "off") {
        auto owner = task->owner.find(-1);
        if (owner != task->owner.end() && owner->second != key)
          return absl::FailedPreconditionError(
              StrCat("job ", task->job_id, " has sharding off: it serves one consumer (client ",
                     owner->second, "); share a job with dynamic sharding"));
      }
      if (options_.max_clients_per_job > 0 && !task->streams.count(key) &&
          static_cast<int64_t>(task->streams.size()) >= options_.max_clients_per_job)
        return absl::ResourceExhaustedError(StrCat(
            "worker ", address_, ": job ", task->job_id, " has ", task->streams.size(),
            " consumers here, the most its --max-clients-per-job (", options_.max_clients_per_job,
            ") allows; restart the worker with a higher "
            "--max-clients-per-job"));
      ++task->streams.try_emplace(key).first->second.requests;
      // Ends the request: a stream that holds nothing (no element, no split: e.g. an unknown or
      // invented client id) is not kept; a later request makes the same empty stream again.
      struct Release {
        Task* task;
        int64_t key;
        ~Release() {
          auto s = task->streams.find(key);
          if (s == task->streams.end() || --s->second.requests > 0) return;
          if (task->num_consumers == 0 && task->sharding == "dynamic" &&
              s->second.next_index == 0 && s->second.splits.empty() && s->second.buffer.empty())
            task->streams.erase(s);
        }
      } release{task.get(), key};
      // Looked up again after each wait: the consumer may have been removed meanwhile.
      auto find = [&]() -> Stream* {
        auto s = task->streams.find(key);
        return s == task->streams.end() ? nullptr : &s->second;
      };
      Stream* stream = find();
      while (!stream->buffer.empty() && stream->first_index < req.next_index()) {
        const Buffered& b = stream->buffer.front();
        task->buffered_bytes -= static_cast<int64_t>(b.payload.size) + 64;
        stream->buffer.pop_front();
        ++stream->first_index;
      }
      if (stream->buffer.empty()) stream->first_index = stream->next_index;
      stream->cursor =
          req.restart() ? req.next_index() : std::max(stream->cursor, req.next_index());
      stream->cursor = std::min(stream->cursor, stream->next_index);
      const bool fcfs = task->num_consumers == 0;
      if (fcfs && stream->next_index <= stream->cursor) AssignSplit(task.get(), key, stream);
      auto ready = [&] {
        Stream* st = find();
        return stopping_ || st == nullptr || st->next_index > st->cursor || task->producer_done ||
               (fcfs && !task->unassigned.empty());
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
      stream = find();
      if (stream == nullptr)
        return absl::FailedPreconditionError(
            StrCat("worker ", address_, ": client ", req.client_id(), " of job ", task->job_id,
                   " was removed by the dispatcher (it missed its heartbeats)"));
      if (fcfs && stream->next_index <= stream->cursor) AssignSplit(task.get(), key, stream);
      int64_t& cursor = stream->cursor;
      int64_t bytes = 0;
      for (int64_t i = std::max(cursor, stream->first_index); i < stream->next_index; ++i) {
        const Buffered& b = stream->buffer[i - stream->first_index];
        int64_t size = static_cast<int64_t>(b.payload.size);
        if (bytes > 0 && bytes + size > max_bytes) break;
        bytes += size;
        copies.push_back(b);
        cursor = i + 1;
      }
      if (task->producer_done && task->unassigned.empty()) {
        stream_end = stream->next_index;
        end_of_stream = cursor >= stream->next_index;
      }
    }
  }
  if (!copies.empty()) {
    MetricsRegistry& metrics = MetricsRegistry::Default();
    const MetricLabels labels = {{"job_id", std::to_string(req.job_id())},
                                 {"client_id", std::to_string(req.client_id())}};
    int64_t elements = 0, bytes = 0;
    for (const Buffered& b : copies) {
      elements += b.meta.empty() ? 0 : 1;
      bytes += static_cast<int64_t>(b.payload.size);
    }
    metrics
        .GetCounter("stoker_worker_sent_elements_total",
                    "Elements sent to consumers (a resent response counts again)", labels)
        .Increment(static_cast<double>(elements));
    metrics.GetCounter("stoker_worker_sent_bytes_total", "Payload bytes sent to consumers", labels)
        .Increment(static_cast<double>(bytes));
  }
  ElementsResponseBuilder builder;
  for (const Buffered& b : copies) builder.Add(b.meta, b.payload.pieces);
  *resp = builder.Finish(end_of_stream, stream_end);
  return absl::OkStatus();
}

// ---- Cross-trainer cache ----

ElementData Worker::LogSplit::MetaAt(int64_t index) const {
  ElementData d;
  d.set_index(index);
  d.set_split_id(split_id);
  d.set_sequence(index - first_index);
  d.set_last(complete && index == first_index + count - 1);
  d.set_empty(empty);
  d.set_epoch(epoch);
  d.set_begin(begin);
  d.set_end(end);
  return d;
}

void Worker::AppendToLog(Task* task, Buffered b) {
  const int64_t index = task->log_end++;
  b.meta.set_index(index);
  if (b.meta.sequence() == 0) {
    LogSplit& s = task->log_splits[index];
    s.split_id = b.meta.split_id();
    s.epoch = b.meta.epoch();
    s.begin = b.meta.begin();
    s.end = b.meta.end();
    s.first_index = index;
    s.empty = b.meta.empty();
  }
  LogSplit& s = task->log_splits.rbegin()->second;  // one producer: splits come whole, in turn
  ++s.count;
  s.complete = b.meta.last();
  task->window_bytes += static_cast<int64_t>(b.payload.size) + 64;
  task->window.push_back(std::move(b));
}

void Worker::AdvanceFastest(Task* task, int64_t cursor) {
  for (; task->fastest < cursor; ++task->fastest)
    task->buffered_bytes -=
        static_cast<int64_t>(task->window[task->fastest - task->window_first].payload.size) + 64;
  // Elements every trainer may still want, oldest first, leave once the window is over budget;
  // never one the fastest trainer has not read.
  while (task->window_bytes > options_.cache_bytes && task->window_first < task->fastest) {
    task->window_bytes -= static_cast<int64_t>(task->window.front().payload.size) + 64;
    task->window.pop_front();
    ++task->window_first;
  }
}

absl::Status Worker::GetTrainerElements(std::shared_ptr<Task> task, const GetElementsRequest& req,
                                        grpc::ByteBuffer* resp) {
  const int64_t max_bytes = req.max_bytes() > 0 ? req.max_bytes() : int64_t{8} << 20;
  const auto removed = [&] {
    return absl::FailedPreconditionError(
        StrCat("worker ", address_, ": client ", req.client_id(), " of job ", task->job_id,
               " was removed by the dispatcher (it missed its heartbeats)"));
  };
  std::shared_ptr<Trainer> trainer;
  {
    absl::MutexLock lock(&mu_);
    if (task->removed_clients.count(req.client_id())) return removed();
    if (options_.max_clients_per_job > 0 && !task->trainers.count(req.client_id()) &&
        static_cast<int64_t>(task->trainers.size()) >= options_.max_clients_per_job)
      return absl::ResourceExhaustedError(StrCat(
          "worker ", address_, ": job ", task->job_id, " has ", task->trainers.size(),
          " trainers here, the most its --max-clients-per-job (", options_.max_clients_per_job,
          ") allows; restart the worker with a higher --max-clients-per-job"));
    std::shared_ptr<Trainer>& slot = task->trainers[req.client_id()];
    if (!slot) {
      slot = std::make_shared<Trainer>();
      slot->id = req.trainer_id();
    }
    trainer = slot;
  }
  absl::MutexLock one_request(&trainer->fetch_mu);
  std::vector<Buffered> out;
  int64_t hits = 0, recomputed = 0, skipped = 0, executed = 0;
  bool end_of_stream = false;
  int64_t stream_end = -1;
  std::optional<LogSplit> recompute;  // the split of the trainer's cursor, behind the window
  int64_t recompute_from = 0, recompute_below = 0;
  std::shared_ptr<const data::Pipeline> pipeline;
  {
    absl::MutexLock lock(&mu_);
    int64_t& cursor = trainer->cursor;
    cursor = req.restart() ? req.next_index() : std::max(cursor, req.next_index());
    cursor = std::min(cursor, task->log_end);
    auto ready = [&] {
      return stopping_ || task->cancelled || task->producer_done || cursor < task->log_end;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
    if (task->removed_clients.count(req.client_id())) return removed();
    if (cursor < task->window_first) {
      auto split = std::prev(task->log_splits.upper_bound(cursor));
      if (task->skip_behind) {
        // Only the places of what the trainer missed, so that it can account for them.
        constexpr int64_t kMostMarkers = 4096;
        for (; cursor < task->window_first && skipped < kMostMarkers; ++cursor, ++skipped) {
          if (cursor >= split->second.first_index + split->second.count) ++split;
          Buffered b{split->second.MetaAt(cursor), EncodedElement()};
          b.meta.set_skipped(true);
          out.push_back(std::move(b));
        }
      } else {
        recompute = split->second;
        recompute_from = cursor;
        recompute_below = task->window_first;
        pipeline = task->pipeline;
      }
    }
    if (!recompute) {
      int64_t bytes = 0;
      for (; cursor >= task->window_first && cursor < task->log_end; ++cursor) {
        const Buffered& b = task->window[cursor - task->window_first];
        int64_t size = static_cast<int64_t>(b.payload.size);
        if (bytes > 0 && bytes + size > max_bytes) break;
        bytes += size;
        out.push_back(b);
        ++hits;
      }
      AdvanceFastest(task.get(), cursor);
      if (task->producer_done) {
        stream_end = task->log_end;
        end_of_stream = cursor >= task->log_end;
      }
    }
  }
  if (recompute) {
    // The trainer missed the start of this part of the split: run the split again from its
    // start (deterministic production gives the same elements) and drop what it has.
    const LogSplit& split = *recompute;
    const int64_t stop = std::min(recompute_below, split.first_index + split.count);
    if (split.empty) {
      out.push_back(Buffered{split.MetaAt(recompute_from), EncodedElement()});
    } else if (pipeline == nullptr) {
      return absl::InternalError(StrCat("job ", task->job_id, ": no pipeline to recompute with"));
    } else {
      if (trainer->rc_first != split.first_index || trainer->rc_next > recompute_from) {
        trainer->rc_provider =
            std::make_unique<data::SingleSplit>(data::Split{split.begin, split.end});
        trainer->rc_it =
            pipeline->MakeIterator(split.epoch, options_.threads, trainer->rc_provider.get());
        trainer->rc_first = split.first_index;
        trainer->rc_next = split.first_index;
      }
      int64_t bytes = 0;
      while (trainer->rc_next < stop && bytes < max_bytes) {
        auto next = trainer->rc_it->GetNext();
        ++executed;
        if (!next.ok())
          return Annotate(next.status(), StrCat("job ", task->job_id, " recomputing split ",
                                                split.split_id, " for trainer ", trainer->id));
        if (!next->has_value())
          return absl::DataLossError(StrCat(
              "job ", task->job_id, ": recomputing split ", split.split_id, " [", split.begin, ", ",
              split.end, ") of epoch ", split.epoch, " gave ", trainer->rc_next - split.first_index,
              " elements, the first run more: the "
              "pipeline is not deterministic, so a trainer behind the cross-trainer cache cannot "
              "be served; use on_fall_behind skip or a larger --cache-bytes"));
        const int64_t index = trainer->rc_next++;
        if (index < recompute_from) continue;  // the trainer has it
        Buffered b{split.MetaAt(index), EncodeElementPieces(**next, task->compression)};
        bytes += static_cast<int64_t>(b.payload.size);
        out.push_back(std::move(b));
        ++recomputed;
      }
      if (trainer->rc_next >= split.first_index + split.count && split.complete) {
        trainer->rc_it.reset();
        trainer->rc_provider.reset();
        trainer->rc_first = -1;
      }
    }
    absl::MutexLock lock(&mu_);
    if (!out.empty()) trainer->cursor = out.back().meta.index() + 1;
  }
  task->cache_hits->Increment(static_cast<double>(hits));
  task->cache_misses->Increment(static_cast<double>(recomputed + skipped));
  task->cache_recomputed->Increment(static_cast<double>(executed));
  task->cache_skipped->Increment(static_cast<double>(skipped));
  if (!out.empty()) {
    MetricsRegistry& metrics = MetricsRegistry::Default();
    const MetricLabels labels = {{"job_id", std::to_string(req.job_id())},
                                 {"client_id", std::to_string(req.client_id())}};
    int64_t elements = 0, bytes = 0;
    for (const Buffered& b : out) {
      elements += b.meta.empty() || b.meta.skipped() ? 0 : 1;
      bytes += static_cast<int64_t>(b.payload.size);
    }
    metrics
        .GetCounter("stoker_worker_sent_elements_total",
                    "Elements sent to consumers (a resent response counts again)", labels)
        .Increment(static_cast<double>(elements));
    metrics.GetCounter("stoker_worker_sent_bytes_total", "Payload bytes sent to consumers", labels)
        .Increment(static_cast<double>(bytes));
  }
  ElementsResponseBuilder builder;
  for (const Buffered& b : out) builder.Add(b.meta, b.payload.pieces);
  GetElementsResponse counts;
  counts.set_cache_hits(hits);
  counts.set_cache_recomputed(recomputed);
  counts.set_cache_skipped(skipped);
  builder.AddFields(counts);
  *resp = builder.Finish(end_of_stream, stream_end);
  return absl::OkStatus();
}

}  // namespace stoker::service
