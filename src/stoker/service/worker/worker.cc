#include "stoker/service/worker/worker.h"

#include <grpcpp/grpcpp.h>

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
  explicit GrpcWorker(stoker::service::Worker* w) : w_(w) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/stoker.service.WorkerService/GetElements", grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<GrpcWorker, GetElementsRequest, grpc::ByteBuffer,
                                             grpc::protobuf::MessageLite, grpc::ByteBuffer>(
            [](GrpcWorker* service, grpc::ServerContext*, const GetElementsRequest* req,
               grpc::ByteBuffer* resp) { return ToGrpc(service->w_->GetElements(*req, resp)); },
            this)));
  }

 private:
  stoker::service::Worker* w_;
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

}  // namespace

Worker::Worker(const WorkerOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Start(const WorkerOptions& options) {
  if (options.dispatcher_address.empty())
    return absl::InvalidArgumentError("a worker needs --dispatcher HOST:PORT");
  std::unique_ptr<Worker> w(new Worker(options));
  w->dispatcher_ = DispatcherService::NewStub(MakeChannel(options.dispatcher_address));
  w->service_ = std::make_unique<GrpcWorker>(w.get());
  ASSIGN_OR_RETURN(w->server_, GrpcServer::Start(w->service_.get(), options.port, "worker",
                                                 /*max_send_message_bytes=*/-1));
  w->port_ = w->server_->port();
  w->address_ = StrCat(options.host, ":", w->port_);
  w->heartbeat_ = StartThread("worker-hb", [p = w.get()] { p->HeartbeatLoop(); });
  return w;
}

Worker::~Worker() {
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
      for (const auto& [job, t] : tasks_)
        if (!t->cancelled && (!t->producer_done || !t->buffer.empty())) return false;
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

void Worker::HeartbeatLoop() {
  auto backoff = options_.heartbeat_interval;
  while (true) {
    WorkerHeartbeatRequest req;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || heartbeats_stopped_) return;
      req.set_worker_id(worker_id_);
      if (!failures_.empty()) {
        req.set_failed_job(failures_.begin()->first);
        req.set_task_error(failures_.begin()->second);
      }
      for (const auto& [id, t] : tasks_)
        if (!t->cancelled) req.add_running_jobs(id);
    }
    req.set_address(address_);
    req.set_wait_ms(options_.heartbeat_interval.count());
    WorkerHeartbeatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcTimeout + options_.heartbeat_interval);
    auto sent = Clock::now();
    grpc::Status s = dispatcher_->WorkerHeartbeat(&ctx, req, &resp);
    std::vector<std::thread> finished;
    {
      absl::MutexLock lock(&mu_);
      bool changed = false;  // the reply's task list differs from the one the request named
      if (!s.ok()) {
        SPDLOG_WARN("worker {}: heartbeat to dispatcher {} failed: {}; retrying", address_,
                    options_.dispatcher_address, s.error_message());
      } else {
        if (worker_id_ != resp.worker_id())
          SPDLOG_INFO("worker {}: registered as worker {}", address_, resp.worker_id());
        worker_id_ = resp.worker_id();
        failures_.erase(req.failed_job());
        std::set<int64_t> listed;
        for (const stoker::service::Task& t : resp.tasks()) {
          listed.insert(t.job_id());
          if (tasks_.count(t.job_id())) continue;
          auto task = std::make_shared<Worker::Task>();
          task->job_id = t.job_id();
          task->spec = t.spec_json();
          task->sharding = t.sharding();
          task->compression = ParseCompression(t.compression()).value_or(Compression::kNone);
          task->num_epochs = std::max<int64_t>(1, t.num_epochs());
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
  }
}

void Worker::RunTask(Task* task) {
  absl::Status s = task->sharding == "off" ? RunWholePipeline(task) : RunDynamic(task);
  absl::MutexLock lock(&mu_);
  if (!s.ok() && !Stopped(task)) {
    SPDLOG_ERROR("worker {}: job {} failed: {}", address_, task->job_id, s.ToString());
    failures_[task->job_id] = std::string(s.message());
  }
  task->producer_done = true;
}

bool Worker::Push(Task* task, ElementData meta, const data::Element* element) {
  // Encoded (and compressed) outside the lock, once: replies reference these pieces.
  EncodedElement payload;
  if (element != nullptr) payload = EncodeElementPieces(*element, task->compression);
  int64_t size = static_cast<int64_t>(payload.size) + 64;
  absl::MutexLock lock(&mu_);
  auto room = [&] {
    return Stopped(task) || task->buffer.empty() ||
           task->buffered_bytes + size <= options_.buffer_bytes;
  };
  mu_.Await(absl::Condition(&room));
  if (Stopped(task)) return false;
  meta.set_index(task->next_index++);
  if (task->buffer.empty()) task->first_index = meta.index();
  task->buffered_bytes += size;
  task->buffer.push_back(Buffered{std::move(meta), std::move(payload)});
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
  for (int64_t epoch = 0; epoch < task->num_epochs; ++epoch) {
    auto it = pipeline->MakeIterator(epoch, options_.threads);
    while (true) {
      ASSIGN_OR_RETURN(std::optional<data::Element> e, it->GetNext());
      if (!e) break;
      ElementData d;
      d.set_split_id(-1);
      d.set_sequence(seq++);
      if (!Push(task, std::move(d), &*e)) return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status Worker::RunDynamic(Task* task) {
  ASSIGN_OR_RETURN(auto pipeline,
                   TaskPipeline(task->spec, data::PluginPolicy::OnlyFrom(options_.plugin_dirs)));
  const int64_t batch = BatchSize(pipeline->spec());
  int64_t wanted = std::max<int64_t>(batch, 16);
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
    req.set_wanted_samples((wanted + batch - 1) / batch * batch);
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
    // Process the split through a fresh iterator, so that its elements are exactly its samples.
    auto start = Clock::now();
    data::SingleSplit provider({resp.begin(), resp.end()});
    auto it = pipeline->MakeIterator(resp.epoch(), options_.threads, &provider);
    std::optional<data::Element> prev;
    int64_t seq = 0;
    auto push = [&](const data::Element* e, bool last) {
      ElementData d;
      d.set_split_id(resp.split_id());
      d.set_sequence(seq++);
      d.set_last(last);
      d.set_empty(e == nullptr);
      return Push(task, std::move(d), e);
    };
    while (true) {
      auto next = it->GetNext();
      if (!next.ok())
        return Annotate(next.status(), StrCat("job ", task->job_id, " split ", resp.split_id(),
                                              " [", resp.begin(), ", ", resp.end(), ")"));
      if (!next->has_value()) break;
      if (prev && !push(&*prev, false)) return absl::OkStatus();
      prev = std::move(**next);
    }
    if (!push(prev ? &*prev : nullptr, true)) return absl::OkStatus();
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
      while (!task->buffer.empty() && task->first_index < req.next_index()) {
        const Buffered& b = task->buffer.front();
        task->buffered_bytes -= static_cast<int64_t>(b.payload.size) + 64;
        task->buffer.pop_front();
        ++task->first_index;
      }
      if (task->buffer.empty()) task->first_index = task->next_index;
      int64_t& cursor = task->cursors[req.client_id()];
      cursor = req.restart() ? req.next_index() : std::max(cursor, req.next_index());
      cursor = std::min(cursor, task->next_index);
      auto ready = [&] { return stopping_ || task->next_index > cursor || task->producer_done; };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
      int64_t bytes = 0;
      for (int64_t i = std::max(cursor, task->first_index); i < task->next_index; ++i) {
        const Buffered& b = task->buffer[i - task->first_index];
        int64_t size = static_cast<int64_t>(b.payload.size);
        if (bytes > 0 && bytes + size > max_bytes) break;
        bytes += size;
        copies.push_back(b);
        cursor = i + 1;
      }
      if (task->producer_done) {
        stream_end = task->next_index;
        end_of_stream = cursor >= task->next_index;
      }
    }
  }
  ElementsResponseBuilder builder;
  for (const Buffered& b : copies) builder.Add(b.meta, b.payload.pieces);
  *resp = builder.Finish(end_of_stream, stream_end);
  return absl::OkStatus();
}

}  // namespace stoker::service
