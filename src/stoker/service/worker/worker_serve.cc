// The worker's serving side (worker.h): GetElements hands each consumer the elements buffered for
// it (dropping those it has received, assigning it the next unassigned split first come first
// served), and, for a cross-trainer cache job, GetTrainerElements serves every trainer the task's
// one log from its window, or recomputes (or skips) what a trainer behind the window missed.
// FinishResponse counts what a reply sends and serializes it without copying payloads, or, for a
// consumer on this host, with the payloads in its shared-memory segment (common/shm_ring.h).
#include <algorithm>
#include <optional>
#include <vector>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/elements_response.h"
#include "stoker/service/common/shm_files.h"
#include "stoker/service/worker/worker.h"

namespace stoker::service {

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
  std::shared_ptr<ShmSegment> shm;
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
      } else if (task->sharding == Sharding::kOff) {
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
      shm = SharedMemoryFor(task.get(), req);
      ++task->streams.try_emplace(key).first->second.requests;
      // Ends the request: a stream that holds nothing (no element, no split: e.g. an unknown or
      // invented client id) is not kept; a later request makes the same empty stream again.
      struct Release {
        Task* task;
        int64_t key;
        ~Release() {
          auto s = task->streams.find(key);
          if (s == task->streams.end() || --s->second.requests > 0) return;
          if (task->num_consumers == 0 && task->sharding == Sharding::kDynamic &&
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
  *resp = FinishResponse(req, copies, /*fields=*/nullptr, end_of_stream, stream_end, shm);
  return absl::OkStatus();
}

std::shared_ptr<ShmSegment> Worker::SharedMemoryFor(Task* task, const GetElementsRequest& req) {
  auto it = task->shm.find(req.client_id());
  const bool wanted = options_.shm_bytes > 0 && !req.shm_host().empty() &&
                      req.shm_host() == ShmHostIdentity() &&
                      !task->removed_clients.count(req.client_id());
  if (!wanted) {
    // The client turned it off (or cannot map it).
    if (it != task->shm.end()) ForgetSharedMemory(task, req.client_id());
    return nullptr;
  }
  if (it == task->shm.end() && task->cross_trainer && task->trainers_shm != nullptr) {
    it = task->shm.emplace(req.client_id(), task->trainers_shm).first;
  } else if (it == task->shm.end()) {
    // One segment per consumer, at most --max-clients-per-job of them per task (invented client
    // ids get no stream kept, and no segment beyond that bound either). A cross-trainer job's
    // trainers share one: room for the window (--cache-bytes) and one consumer's segment, as
    // trainers reading in step hold the same copies.
    if (shm_failed_ || (options_.max_clients_per_job > 0 &&
                        static_cast<int64_t>(task->shm.size()) >= options_.max_clients_per_job))
      return nullptr;
    const int64_t size =
        options_.shm_bytes + (task->cross_trainer ? std::max<int64_t>(options_.cache_bytes, 0) : 0);
    auto made = ShmSegment::Create(static_cast<uint64_t>(size));
    if (!made.ok()) {
      shm_failed_ = true;
      SPDLOG_WARN(
          "worker {}: no shared memory for consumers on this host ({}); sending every "
          "payload in the reply",
          address_, std::string(made.status().message()));
      return nullptr;
    }
    it = task->shm.emplace(req.client_id(), *std::move(made)).first;
    if (task->cross_trainer) task->trainers_shm = it->second;
  }
  if (req.shm_segment() == it->second->info().id)
    for (int64_t id : req.shm_released()) it->second->Release(id, req.client_id());
  return it->second;
}

void Worker::ForgetSharedMemory(Task* task, int64_t client) {
  auto it = task->shm.find(client);
  if (it == task->shm.end()) return;
  if (it->second != task->trainers_shm) {
    task->shm.erase(it);
    return;
  }
  std::shared_ptr<ShmSegment> retired = std::move(task->trainers_shm);
  for (auto s = task->shm.begin(); s != task->shm.end();)
    s = s->second == retired ? task->shm.erase(s) : std::next(s);
  SPDLOG_INFO(
      "worker {}: job {}: client {} no longer reads its trainers' shared-memory segment; the "
      "others get a new one (what it holds there stays as it is)",
      address_, task->job_id, client);
}

grpc::ByteBuffer Worker::FinishResponse(const GetElementsRequest& req,
                                        const std::vector<Buffered>& out,
                                        const GetElementsResponse* fields, bool end_of_stream,
                                        int64_t stream_end,
                                        const std::shared_ptr<ShmSegment>& shm) {
  ElementsResponseBuilder builder;
  int64_t shm_elements = 0, shm_bytes = 0, shm_full = 0, shm_shared = 0, shm_file_bytes = 0;
  // Payload bytes that are ranges of files this worker mapped go to a consumer that maps files
  // as those ranges (`out` holds their Buffers, so the files stay open until it has them). Not
  // for a cross-trainer job's shared copies, which every trainer reads alike.
  SharedFileTable files;
  for (const Buffered& b : out) {
    if (shm != nullptr && b.payload.size > 0) {
      bool shared = false;
      SharedFileTable::Split split;
      if (req.shm_files() && b.shared == nullptr) split = files.SplitPayload(b.payload.pieces);
      if (split.spans.empty()) split = {b.payload.pieces, b.payload.size, {}};
      std::optional<ShmSegment::Ref> ref =
          b.shared != nullptr
              ? b.shared->Get(shm, b.payload.pieces, b.payload.size, req.client_id(), &shared)
              : shm->Place(split.copied, split.copied_size, req.client_id());
      if (ref) {
        ElementData meta = b.meta;
        meta.set_shm_slot(ref->id);
        meta.set_shm_offset(static_cast<int64_t>(ref->offset));
        meta.set_shm_length(static_cast<int64_t>(split.copied_size));
        for (PayloadSpan& span : split.spans) *meta.add_shm_spans() = std::move(span);
        builder.Add(meta, {});
        ++shm_elements;
        shm_shared += shared ? 1 : 0;
        shm_bytes += static_cast<int64_t>(b.payload.size);
        shm_file_bytes += static_cast<int64_t>(b.payload.size - split.copied_size);
        continue;
      }
      ++shm_full;
    }
    builder.Add(b.meta, b.payload.pieces);
  }
  if (shm_elements > 0) {
    GetElementsResponse segment;
    const ShmSegmentInfo& info = shm->info();
    SharedMemorySegment* s = segment.mutable_shm();
    s->set_id(info.id);
    s->set_pid(info.pid);
    s->set_fd(info.fd);
    s->set_size(static_cast<int64_t>(info.size));
    s->set_inode(static_cast<int64_t>(info.inode));
    files.AddTo(&segment);
    builder.AddFields(segment);
  }
  if (fields != nullptr) builder.AddFields(*fields);
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
    if (shm != nullptr) {
      metrics
          .GetCounter("stoker_worker_shm_elements_total",
                      "Elements handed to consumers through shared memory", labels)
          .Increment(static_cast<double>(shm_elements));
      metrics
          .GetCounter("stoker_worker_shm_bytes_total",
                      "Payload bytes handed to consumers through shared memory", labels)
          .Increment(static_cast<double>(shm_bytes));
      metrics
          .GetCounter("stoker_worker_shm_full_total",
                      "Elements sent inline because the consumer's shared-memory segment was full",
                      labels)
          .Increment(static_cast<double>(shm_full));
      if (shm_file_bytes > 0)
        metrics
            .GetCounter("stoker_worker_shm_file_bytes_total",
                        "Of the payload bytes handed through shared memory, those handed as "
                        "ranges of files the consumer maps itself (no copy)",
                        labels)
            .Increment(static_cast<double>(shm_file_bytes));
      if (shm_shared > 0)
        metrics
            .GetCounter("stoker_worker_shm_shared_elements_total",
                        "Elements handed through shared memory as a reference to the copy "
                        "another trainer of a cross-trainer job was handed (no copy made)",
                        labels)
            .Increment(static_cast<double>(shm_shared));
    }
  }
  return builder.Finish(end_of_stream, stream_end);
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
  if (options_.shm_bytes > 0 && b.payload.size > 0) b.shared = std::make_shared<ShmSharedCopy>();
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
  std::shared_ptr<ShmSegment> shm;
  {
    absl::MutexLock lock(&mu_);
    if (task->removed_clients.count(req.client_id())) return removed();
    if (options_.max_clients_per_job > 0 && !task->trainers.count(req.client_id()) &&
        static_cast<int64_t>(task->trainers.size()) >= options_.max_clients_per_job)
      return absl::ResourceExhaustedError(StrCat(
          "worker ", address_, ": job ", task->job_id, " has ", task->trainers.size(),
          " trainers here, the most its --max-clients-per-job (", options_.max_clients_per_job,
          ") allows; restart the worker with a higher --max-clients-per-job"));
    shm = SharedMemoryFor(task.get(), req);
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
    // Window elements every trainer here has received: a trainer that asks later (it joins, or
    // restarts) gets a copy of its own unless another still holds theirs.
    trainer->received = std::max(trainer->received, req.next_index());
    int64_t slowest = task->log_end;
    for (const auto& [client, t] : task->trainers) slowest = std::min(slowest, t->received);
    for (task->shm_kept_from = std::max(task->shm_kept_from, task->window_first);
         task->shm_kept_from < slowest; ++task->shm_kept_from) {
      const Buffered& kept = task->window[task->shm_kept_from - task->window_first];
      // Never waits: every trainer's response with this element was built (no Get copying).
      if (kept.shared != nullptr) kept.shared->Drop();
    }
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
  GetElementsResponse counts;
  counts.set_cache_hits(hits);
  counts.set_cache_recomputed(recomputed);
  counts.set_cache_skipped(skipped);
  *resp = FinishResponse(req, out, &counts, end_of_stream, stream_end, shm);
  return absl::OkStatus();
}

}  // namespace stoker::service
