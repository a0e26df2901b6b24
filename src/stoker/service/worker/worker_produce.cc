// The worker's production side (worker.h): RunTask runs a task's pipeline on its own thread,
// either whole (sharding off) or split by split as the dispatcher leases them (RunDynamic, which
// sizes each request so that a split takes about split_target), deals coordinated jobs' batches out
// in rounds (PushRounds), and buffers each encoded element for the consumer its split goes to
// (Push, waiting while the task's buffers are full). A task's failure is reported with the next
// heartbeat and may make the worker unhealthy.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/snapshot.h"
#include "stoker/data/to_device.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/worker/worker.h"

namespace stoker::service {
namespace {

using Clock = std::chrono::steady_clock;

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

void Worker::AddBusy(Task* task, Clock::duration d) {
  task->busy_seconds->Increment(std::chrono::duration<double>(d).count());
  busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                     std::memory_order_relaxed);
}

void Worker::RunTask(Task* task) {
  absl::Status s = task->sharding == Sharding::kOff ? RunWholePipeline(task) : RunDynamic(task);
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
    return Stopped(task) || Abandoning() || task->buffered_bytes == 0 ||
           task->buffered_bytes + size <= options_.buffer_bytes;
  };
  mu_.Await(absl::Condition(&room));
  // Draining without a dispatcher: nobody can acknowledge this split; it is leased again.
  if (Stopped(task) || Abandoning()) return false;
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
// A snapshot job's spec (`stoker snapshot`) carries {"snapshot": {"url": DST}} at the top level:
// it is taken out of the spec before the pipeline is built, and its URL goes to *snapshot_url.
static absl::StatusOr<std::shared_ptr<const data::Pipeline>> TaskPipeline(
    const std::string& spec, const data::PluginPolicy& plugins,
    std::string* snapshot_url = nullptr) {
  nlohmann::json parsed = nlohmann::json::parse(spec, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("snapshot")) {
    const nlohmann::json& snapshot = parsed["snapshot"];
    if (snapshot_url == nullptr || !snapshot.is_object() || !snapshot.contains("url") ||
        !snapshot["url"].is_string())
      return absl::InvalidArgumentError(
          "$.snapshot: expected {\"url\": DST} in a job made by `stoker snapshot` (with dynamic "
          "sharding)");
    *snapshot_url = snapshot["url"].get<std::string>();
    parsed.erase("snapshot");
    return data::Pipeline::FromString(parsed.dump(), plugins);
  }
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

// Runs a split of a snapshot job through `it` into the part
// "part-e<epoch>-s<split>-w<worker>-<random>.stk" at `url`, and returns the element that names it
// (nullopt when the split yields no element: no part is written). The name is new for every
// attempt, so a split run again after a worker died never overwrites a part a reader may hold.
absl::StatusOr<std::optional<data::Element>> Worker::WriteSnapshotPart(
    Task* task, const std::string& url, const GetSplitResponse& split, data::PipelineIterator* it) {
  std::unique_ptr<data::SnapshotPartWriter> writer;
  std::random_device random;
  const uint64_t nonce = random() ^ (static_cast<uint64_t>(random()) << 32);
  int64_t worker_id = 0;
  {
    absl::MutexLock lock(&mu_);
    worker_id = worker_id_;
  }
  char name[128];
  std::snprintf(name, sizeof(name), "part-e%05lld-s%08lld-w%lld-%016llx.stk",
                static_cast<long long>(split.epoch()), static_cast<long long>(split.split_id()),
                static_cast<long long>(worker_id), static_cast<unsigned long long>(nonce));
  while (true) {
    ASSIGN_OR_RETURN(std::optional<data::Element> e, it->GetNext());
    if (!e) break;
    if (!writer) {
      ASSIGN_OR_RETURN(writer, data::SnapshotPartWriter::Open(url, name));
    }
    RETURN_IF_ERROR(writer->Add(*e));
  }
  if (!writer) return std::nullopt;
  ASSIGN_OR_RETURN(data::SnapshotPart part, writer->Close());
  data::Element out;
  out.keys.push_back(part.name);
  out.fields["part"] = data::Tensor::Bytes(Buffer::FromString(part.name));
  out.fields["records"] = data::Tensor::Scalar(static_cast<int64_t>(part.records));
  out.fields["bytes"] = data::Tensor::Scalar(static_cast<int64_t>(part.bytes));
  std::string fields;
  for (const std::string& f : part.fields) {  // NUL-separated: field names hold no NUL
    if (!fields.empty()) fields.push_back('\0');
    fields += f;
  }
  out.fields["fields"] = data::Tensor::Bytes(Buffer::FromString(std::move(fields)));
  out.epoch = split.epoch();
  return out;
}

absl::Status Worker::RunDynamic(Task* task) {
  std::string snapshot_url;
  ASSIGN_OR_RETURN(
      auto pipeline,
      TaskPipeline(task->spec, data::PluginPolicy::OnlyFrom(options_.plugin_dirs), &snapshot_url));
  if (!snapshot_url.empty() && (task->num_consumers > 0 || task->cross_trainer))
    return absl::InvalidArgumentError(
        "a snapshot job has one consumer (`stoker snapshot`): no coordinated reads, no "
        "cross-trainer cache");
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
  // One GetSplit: its reply waits for the dispatcher's journal sync (milliseconds on a disk).
  struct Lease {
    int64_t worker_id = 0;  // 0: not registered yet (the reply is not a lease)
    grpc::Status status;
    GetSplitResponse resp;
  };
  auto ask = [this, task, unit, samples = *size](int64_t worker_id, int64_t last, int64_t n) {
    Lease lease;
    lease.worker_id = worker_id;
    GetSplitRequest req;
    req.set_worker_id(worker_id);
    req.set_job_id(task->job_id);
    req.set_last_split_id(last);
    req.set_wanted_samples((n + unit - 1) / unit * unit);
    req.set_num_samples(samples);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcTimeout);
    lease.status = dispatcher_->GetSplit(&ctx, req, &lease.resp);
    return lease;
  };
  // The next split, asked for while the current one runs, so that the pipeline does not idle
  // through that sync at every split. The request names the split in hand as the last one
  // received, as a request after it would (docs/protocol.md, "Split size").
  std::future<Lease> ahead;
  while (true) {
    Lease lease;
    if (ahead.valid()) {
      lease = ahead.get();  // a split granted is run even if a drain began meanwhile
      absl::MutexLock lock(&mu_);
      if (Stopped(task)) return absl::OkStatus();
    } else {
      int64_t worker_id = 0;
      {
        absl::MutexLock lock(&mu_);
        auto room = [&] {
          return Stopped(task) || draining_ || task->buffered_bytes < options_.buffer_bytes / 2;
        };
        mu_.Await(absl::Condition(&room));
        if (Stopped(task) || draining_) return absl::OkStatus();
        worker_id = worker_id_;
      }
      lease = ask(worker_id, last_split_id, wanted);
    }
    const grpc::Status& s = lease.status;
    const GetSplitResponse& resp = lease.resp;
    if (!s.ok() || resp.kind() == GetSplitResponse::WAIT || lease.worker_id == 0) {
      if (!s.ok() && s.error_code() == grpc::StatusCode::NOT_FOUND)
        return FromGrpc(s, StrCat("GetSplit from dispatcher ", options_.dispatcher_address));
      absl::MutexLock lock(&mu_);
      auto stopped = [&] { return Stopped(task) || draining_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopped), absl::Milliseconds(s.ok() ? 50 : 200));
      continue;
    }
    if (resp.kind() == GetSplitResponse::END) return absl::OkStatus();
    last_split_id = resp.split_id();
    {
      absl::MutexLock lock(&mu_);
      if (!Stopped(task) && !draining_ && worker_id_ != 0 &&
          task->buffered_bytes < options_.buffer_bytes / 2)
        ahead = std::async(std::launch::async, ask, worker_id_, last_split_id, wanted);
    }
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
    if (!snapshot_url.empty()) {
      // A snapshot job: the split's elements go to a part of their own, named for the split and
      // this attempt; the consumer receives one element naming the committed part.
      auto busy_from = Clock::now();
      absl::StatusOr<std::optional<data::Element>> part =
          WriteSnapshotPart(task, snapshot_url, resp, it.get());
      AddBusy(task, Clock::now() - busy_from);
      if (!part.ok())
        return Annotate(part.status(), StrCat("job ", task->job_id, " split ", resp.split_id(),
                                              " [", resp.begin(), ", ", resp.end(), ")"));
      if (!push(*part ? &**part : nullptr, true)) return absl::OkStatus();
    } else {
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
    }
    task->splits_done->Increment();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    double per_second = (resp.end() - resp.begin()) / std::max(seconds, 1e-4);
    double target = std::chrono::duration<double>(options_.split_target).count();
    // A snapshot job's split is one part: sized for a second of work (at least), so that parts
    // are few and large, as the format wants shards to be.
    if (!snapshot_url.empty()) target = std::max(target, 1.0);
    wanted = std::clamp<int64_t>(static_cast<int64_t>(per_second * target), 1, wanted * 4);
  }
}

}  // namespace stoker::service
