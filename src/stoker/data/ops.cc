#include "stoker/data/ops.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <numeric>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/random.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// CPU time of the calling thread, so stage costs stay meaningful on a busy machine.
int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

absl::Status BadState(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("iterator state does not match this pipeline (", what,
                                           "); restore a token saved by the same spec"));
}

absl::StatusOr<int64_t> StateInt(const json& state, const char* key) {
  if (!state.is_object() || !state.contains(key) || !state[key].is_number_integer()) {
    return BadState(StrCat("missing '", key, "'"));
  }
  return state[key].get<int64_t>();
}

absl::StatusOr<const json*> StateChild(const json& state, const char* key) {
  if (!state.is_object() || !state.contains(key)) return BadState(StrCat("missing '", key, "'"));
  return &state[key];
}

// ---------------------------------------------------------------------------------------------
// Indexed source: reads the (optionally permuted) index order in chunks of kReadChunk samples, so
// the source can turn them into few large reads.

constexpr int64_t kReadChunk = 32;

class IndexedSourceNode : public DatasetNode {
 public:
  IndexedSourceNode(std::shared_ptr<IndexedSource> source, std::optional<uint64_t> seed,
                    bool reshuffle)
      : source_(std::move(source)), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override { return source_->size(); }

  std::shared_ptr<IndexedSource> source_;
  std::optional<uint64_t> seed_;
  bool reshuffle_;
};

class IndexedSourceIterator : public Iterator {
 public:
  IndexedSourceIterator(const IndexedSourceNode& node, const IteratorContext& ctx)
      : node_(node), ctx_(ctx), stats_(ctx.runtime->Stats("source")) {
    int64_t n = node.source_->size();
    if (node.seed_) {
      order_.resize(n);
      std::iota(order_.begin(), order_.end(), 0);
      Rng rng(MixSeed({*node.seed_, static_cast<uint64_t>(node.reshuffle_ ? ctx.epoch : 0)}));
      for (int64_t i = n - 1; i > 0; --i) {
        std::swap(order_[i], order_[rng.Below(static_cast<uint64_t>(i) + 1)]);
      }
    }
  }

  absl::StatusOr<std::optional<Element>> GetNext() override {
    const int64_t n = node_.source_->size();
    if (!split_) split_ = ctx_.splits ? Split{0, 0} : Split{0, n};
    while (ahead_.empty() && pos_ >= split_->end) {
      if (ctx_.splits == nullptr) return std::nullopt;
      ASSIGN_OR_RETURN(std::optional<Split> next, ctx_.splits->GetNext());
      if (!next) return std::nullopt;
      if (next->begin < 0 || next->end > n || next->begin > next->end) {
        return absl::OutOfRangeError(StrCat("split [", next->begin, ", ", next->end,
                                            ") is outside the dataset's ", n, " samples"));
      }
      split_ = next;
      pos_ = next->begin;
    }
    if (ahead_.empty()) {
      std::vector<int64_t> indices;
      const int64_t end = std::min(split_->end, pos_ + kReadChunk);
      for (int64_t i = pos_; i < end; ++i) indices.push_back(order_.empty() ? i : order_[i]);
      int64_t start = ThreadCpuNanos();
      ASSIGN_OR_RETURN(std::vector<Element> read, node_.source_->Read(indices));
      stats_->busy_ns += ThreadCpuNanos() - start;
      // A source may leave out samples it skipped (corrupt records): match by sample index so
      // positions stay exact.
      size_t j = 0;
      for (int64_t i = pos_; i < end && j < read.size(); ++i) {
        if (read[j].sample_index != static_cast<uint64_t>(indices[i - pos_])) continue;
        Element& e = read[j++];
        e.epoch = ctx_.epoch;
        stats_->elements += 1;
        stats_->bytes += static_cast<int64_t>(e.ByteSize());
        ahead_.emplace_back(i, std::move(e));
      }
      pos_ = end;
      if (ahead_.empty()) return GetNext();  // the whole chunk was skipped
    }
    auto [position, e] = std::move(ahead_.front());
    ahead_.pop_front();
    delivered_ = position + 1;
    return std::move(e);
  }
  absl::StatusOr<json> Save() override {
    json state = {{"pos", delivered_}};
    if (split_) state["split"] = {split_->begin, split_->end};
    return state;
  }
  absl::Status Restore(const json& state) override {
    ASSIGN_OR_RETURN(int64_t pos, StateInt(state, "pos"));
    const int64_t n = node_.source_->size();
    split_.reset();
    if (state.contains("split")) {
      const json& s = state["split"];
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() ||
          !s[1].is_number_integer()) {
        return BadState("bad split");
      }
      split_ = Split{s[0].get<int64_t>(), s[1].get<int64_t>()};
      if (split_->begin < 0 || split_->end > n || split_->begin > split_->end) {
        return BadState("split out of range");
      }
    }
    if (pos < 0 || pos > n) return BadState("position out of range");
    pos_ = delivered_ = pos;
    ahead_.clear();
    return absl::OkStatus();
  }

 private:
  const IndexedSourceNode& node_;
  IteratorContext ctx_;
  StageStats* stats_;
  std::vector<int64_t> order_;  // empty: identity
  std::optional<Split> split_;  // positions being read (the whole epoch without a provider)
  int64_t pos_ = 0;             // next position to read
  int64_t delivered_ = 0;       // position after the last element returned
  std::deque<std::pair<int64_t, Element>> ahead_;  // read, not yet returned, with positions
};

std::unique_ptr<Iterator> IndexedSourceNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<IndexedSourceIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Stream source.

class StreamSourceNode : public DatasetNode {
 public:
  StreamSourceNode(std::shared_ptr<StreamSource> source, std::optional<uint64_t> seed)
      : source_(std::move(source)), seed_(seed) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;

  std::shared_ptr<StreamSource> source_;
  std::optional<uint64_t> seed_;
};

class StreamSourceIterator : public Iterator {
 public:
  StreamSourceIterator(const StreamSourceNode& node, const IteratorContext& ctx)
      : node_(node), ctx_(ctx), stats_(ctx.runtime->Stats("source")) {
    order_.resize(node.source_->num_shards());
    std::iota(order_.begin(), order_.end(), 0);
    if (node.seed_) {
      Rng rng(MixSeed({*node.seed_, static_cast<uint64_t>(ctx.epoch)}));
      for (int i = static_cast<int>(order_.size()) - 1; i > 0; --i) {
        std::swap(order_[i], order_[rng.Below(i + 1)]);
      }
    }
  }

  absl::StatusOr<std::optional<Element>> GetNext() override {
    if (ctx_.splits != nullptr) {
      return absl::UnimplementedError(
          "dynamic sharding (splits) needs an indexed source (\"dataset\"), not a stream");
    }
    while (shard_pos_ < static_cast<int64_t>(order_.size())) {
      int64_t start = ThreadCpuNanos();
      if (stream_ == nullptr) {
        ASSIGN_OR_RETURN(stream_, node_.source_->OpenShard(order_[shard_pos_]));
        for (int64_t i = 0; i < record_; ++i) {  // after Restore: skip what was delivered
          ASSIGN_OR_RETURN(std::optional<Element> skipped, stream_->Next());
          if (!skipped) return BadState("shard is shorter than the saved position");
        }
      }
      ASSIGN_OR_RETURN(std::optional<Element> e, stream_->Next());
      stats_->busy_ns += ThreadCpuNanos() - start;
      if (e) {
        e->epoch = ctx_.epoch;
        e->sample_index = (static_cast<uint64_t>(order_[shard_pos_]) << 32) | record_;
        ++record_;
        stats_->elements += 1;
        stats_->bytes += static_cast<int64_t>(e->ByteSize());
        return e;
      }
      stream_.reset();
      ++shard_pos_;
      record_ = 0;
    }
    return std::nullopt;
  }
  absl::StatusOr<json> Save() override { return json{{"shard", shard_pos_}, {"record", record_}}; }
  absl::Status Restore(const json& state) override {
    ASSIGN_OR_RETURN(shard_pos_, StateInt(state, "shard"));
    ASSIGN_OR_RETURN(record_, StateInt(state, "record"));
    if (shard_pos_ < 0 || shard_pos_ > static_cast<int64_t>(order_.size()) || record_ < 0) {
      return BadState("shard position out of range");
    }
    stream_.reset();
    return absl::OkStatus();
  }

 private:
  const StreamSourceNode& node_;
  IteratorContext ctx_;
  StageStats* stats_;
  std::vector<int> order_;
  int64_t shard_pos_ = 0;  // index into order_
  int64_t record_ = 0;     // records of the current shard already returned
  std::unique_ptr<SampleStream> stream_;
};

std::unique_ptr<Iterator> StreamSourceNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<StreamSourceIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Parallel map. The consumer thread pulls input elements and schedules the fused steps on the
// shared pool, keeping up to `limit_` in flight; results are returned in input order
// (deterministic) or as they complete. Each slot remembers the input's state right after its
// element was pulled, so Save() can describe "after the last element returned" exactly.

class MapNode : public DatasetNode {
 public:
  MapNode(NodePtr input, std::vector<MapStep> steps, int parallelism)
      : input_(std::move(input)), steps_(std::move(steps)), parallelism_(parallelism) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;

  NodePtr input_;
  std::vector<MapStep> steps_;
  int parallelism_;
};

absl::StatusOr<std::optional<Element>> RunSteps(const std::vector<MapStep>& steps,
                                                const std::vector<StageStats*>& stats, Element e) {
  for (size_t i = 0; i < steps.size(); ++i) {
    int64_t start = ThreadCpuNanos();
    Rng rng(MixSeed({steps[i].seed, static_cast<uint64_t>(e.epoch), e.sample_index}));
    std::string key = e.FirstKey();
    auto result = steps[i].transform->Apply(std::move(e), rng);
    stats[i]->busy_ns += ThreadCpuNanos() - start;
    if (!result.ok()) {
      return Annotate(result.status(), StrCat(steps[i].name, " on sample '", key, "'"));
    }
    if (!result->has_value()) {
      stats[i]->skipped += 1;
      return std::nullopt;
    }
    e = std::move(**result);
    stats[i]->elements += 1;
    stats[i]->bytes += static_cast<int64_t>(e.ByteSize());
  }
  return e;
}

class MapIterator : public Iterator {
 public:
  MapIterator(const MapNode& node, const IteratorContext& ctx)
      : node_(node), ctx_(ctx), input_(node.input_->MakeIterator(ctx)) {
    for (const MapStep& s : node.steps_) stats_.push_back(ctx.runtime->Stats(s.name));
    int threads = ctx.runtime->threads();
    limit_ = node.parallelism_ > 0 ? node.parallelism_ : threads;
    max_limit_ = node.parallelism_ > 0 ? node.parallelism_ : 4 * threads;
    stats_.front()->parallelism = limit_;
  }
  ~MapIterator() override { Drain(); }

  absl::StatusOr<std::optional<Element>> GetNext() override {
    if (!delivered_state_) {
      auto s = input_->Save();
      delivered_state_ = s.ok() ? *s : json();
    }
    while (true) {
      while (!input_done_ && static_cast<int>(slots_.size()) < limit_) {
        absl::StatusOr<std::optional<Element>> in = input_->GetNext();
        auto slot = std::make_shared<Slot>();
        if (!in.ok() || !in->has_value()) {
          input_done_ = true;
          if (in.ok()) break;
          slot->result = in.status();
          slot->done = true;
          slots_.push_back(slot);
          break;
        }
        auto state = input_->Save();
        slot->input_state = state.ok() ? *state : json();
        slots_.push_back(slot);
        Schedule(slot, std::move(**in));
      }
      if (slots_.empty()) return std::nullopt;

      std::shared_ptr<Slot> slot;
      auto wait_start = Clock::now();
      {
        absl::MutexLock lock(&shared_->mu);
        if (ctx_.runtime->deterministic()) {
          slot = slots_.front();
          shared_->mu.Await(absl::Condition(
              +[](Slot* s) { return s->done; }, slot.get()));
        } else {
          auto any_done = [this]() {
            return std::any_of(slots_.begin(), slots_.end(), [](auto& s) { return s->done; });
          };
          shared_->mu.Await(absl::Condition(&any_done));
          slot = *std::find_if(slots_.begin(), slots_.end(), [](auto& s) { return s->done; });
        }
      }
      Autotune(NanosSince(wait_start));
      slots_.erase(std::find(slots_.begin(), slots_.end(), slot));
      delivered_state_ = slot->input_state;
      if (!slot->result.ok()) return slot->result.status();
      if (!slot->result->has_value()) continue;  // dropped by a filter or on_error: skip
      return std::move(*slot->result);
    }
  }

  absl::StatusOr<json> Save() override {
    if (!ctx_.runtime->deterministic()) {
      return absl::FailedPreconditionError(
          "cannot save the position of a pipeline run with deterministic: false (elements "
          "complete out of order); set \"deterministic\": true to checkpoint");
    }
    if (!delivered_state_) return input_->Save();
    if (delivered_state_->is_null()) return absl::FailedPreconditionError("input cannot be saved");
    return *delivered_state_;
  }

  absl::Status Restore(const json& state) override {
    Drain();
    slots_.clear();
    input_done_ = false;
    RETURN_IF_ERROR(input_->Restore(state));
    delivered_state_ = state;
    return absl::OkStatus();
  }

 private:
  struct Slot {
    absl::StatusOr<std::optional<Element>> result = std::nullopt;
    bool done = false;  // guarded by Shared::mu
    json input_state;
  };
  // State shared with tasks on the pool, which may outlive nothing: the destructor drains them.
  struct Shared {
    absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
  };

  void Schedule(std::shared_ptr<Slot> slot, Element e) {
    {
      absl::MutexLock lock(&shared_->mu);
      ++shared_->in_flight;
    }
    ctx_.runtime->pool().Schedule([this, slot, shared = shared_, e = std::move(e)]() mutable {
      auto result = RunSteps(node_.steps_, stats_, std::move(e));
      absl::MutexLock lock(&shared->mu);
      slot->result = std::move(result);
      slot->done = true;
      --shared->in_flight;
    });
  }

  void Drain() {
    absl::MutexLock lock(&shared_->mu);
    shared_->mu.Await(absl::Condition(
        +[](Shared* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->in_flight == 0; },
        shared_.get()));
  }

  // Every kWindow elements: if the consumer waited for results a good part of the time, more
  // elements in flight may help (up to 4 per thread and the memory budget); if it hardly waited,
  // give memory back.
  void Autotune(int64_t waited_ns) {
    if (node_.parallelism_ > 0) return;
    constexpr int kWindow = 32;
    window_wait_ns_ += waited_ns;
    if (++window_count_ < kWindow) return;
    int64_t window_ns = NanosSince(window_start_);
    int64_t avg_bytes =
        std::max<int64_t>(1, stats_.back()->bytes / std::max<int64_t>(1, stats_.back()->elements));
    int memory_limit = static_cast<int>(
        std::clamp<int64_t>(ctx_.runtime->memory_budget_bytes() / 4 / avg_bytes, 1, 1 << 20));
    int ceiling = std::min(max_limit_, memory_limit);
    if (window_wait_ns_ * 5 > window_ns && limit_ < ceiling) {
      ++limit_;
    } else if ((window_wait_ns_ * 50 < window_ns && limit_ > ctx_.runtime->threads()) ||
               limit_ > ceiling) {
      --limit_;
    }
    stats_.front()->parallelism = limit_;
    window_count_ = 0;
    window_wait_ns_ = 0;
    window_start_ = Clock::now();
  }

  const MapNode& node_;
  IteratorContext ctx_;
  std::unique_ptr<Iterator> input_;
  std::vector<StageStats*> stats_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::deque<std::shared_ptr<Slot>> slots_;  // in input order
  bool input_done_ = false;
  std::optional<json> delivered_state_;  // input state after the last returned element
  int limit_;
  int max_limit_;
  int window_count_ = 0;
  int64_t window_wait_ns_ = 0;
  Clock::time_point window_start_ = Clock::now();
};

std::unique_ptr<Iterator> MapNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<MapIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Replay: ops that hold many elements between calls (shuffle buffer, buckets) save the input's
// state when they started plus how many elements they returned; Restore replays that many.
// Such ops usually sit before decoding, where replay is cheap.

class ReplayIterator : public Iterator {
 public:
  ReplayIterator(std::unique_ptr<Iterator> input) : input_(std::move(input)) {}
  absl::StatusOr<std::optional<Element>> GetNext() final {
    if (!start_state_) {
      ASSIGN_OR_RETURN(start_state_, input_->Save());
    }
    ASSIGN_OR_RETURN(std::optional<Element> e, Produce());
    if (e) ++returned_;
    return e;
  }
  absl::StatusOr<json> Save() final {
    if (!start_state_) {
      ASSIGN_OR_RETURN(start_state_, input_->Save());
    }
    return json{{"start", *start_state_}, {"returned", returned_}};
  }
  absl::Status Restore(const json& state) final {
    ASSIGN_OR_RETURN(const json* start, StateChild(state, "start"));
    ASSIGN_OR_RETURN(int64_t returned, StateInt(state, "returned"));
    Reset();
    RETURN_IF_ERROR(input_->Restore(*start));
    start_state_ = *start;
    returned_ = 0;
    for (int64_t i = 0; i < returned; ++i) {
      ASSIGN_OR_RETURN(std::optional<Element> e, Produce());
      if (!e) return BadState("fewer elements on replay than saved");
    }
    returned_ = returned;
    return absl::OkStatus();
  }

 protected:
  virtual absl::StatusOr<std::optional<Element>> Produce() = 0;
  virtual void Reset() = 0;
  std::unique_ptr<Iterator> input_;

 private:
  std::optional<json> start_state_;
  int64_t returned_ = 0;
};

class ShuffleBufferNode : public DatasetNode {
 public:
  ShuffleBufferNode(NodePtr input, int64_t size, uint64_t seed, bool reshuffle)
      : input_(std::move(input)), size_(size), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override { return input_->Cardinality(); }

  NodePtr input_;
  int64_t size_;
  uint64_t seed_;
  bool reshuffle_;
};

class ShuffleBufferIterator : public ReplayIterator {
 public:
  ShuffleBufferIterator(const ShuffleBufferNode& node, const IteratorContext& ctx)
      : ReplayIterator(node.input_->MakeIterator(ctx)),
        node_(node),
        seed_(MixSeed({node.seed_, static_cast<uint64_t>(node.reshuffle_ ? ctx.epoch : 0)})),
        rng_(seed_) {}

 protected:
  absl::StatusOr<std::optional<Element>> Produce() override {
    while (!input_done_ && static_cast<int64_t>(buffer_.size()) < node_.size_) {
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (!e) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*e));
    }
    if (buffer_.empty()) return std::nullopt;
    size_t pick = rng_.Below(buffer_.size());
    std::swap(buffer_[pick], buffer_.back());
    Element out = std::move(buffer_.back());
    buffer_.pop_back();
    return out;
  }
  void Reset() override {
    buffer_.clear();
    input_done_ = false;
    rng_ = Rng(seed_);
  }

 private:
  const ShuffleBufferNode& node_;
  uint64_t seed_;
  Rng rng_;
  std::vector<Element> buffer_;
  bool input_done_ = false;
};

std::unique_ptr<Iterator> ShuffleBufferNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<ShuffleBufferIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Batch and padded batch: nothing is held between calls, so the state is the input's.

class BatchNode : public DatasetNode {
 public:
  BatchNode(NodePtr input, BatchOptions options) : input_(std::move(input)), options_(options) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override {
    auto n = input_->Cardinality();
    if (!n) return n;
    return options_.drop_remainder ? *n / options_.size : (*n + options_.size - 1) / options_.size;
  }

  NodePtr input_;
  BatchOptions options_;
};

class BatchIterator : public Iterator {
 public:
  BatchIterator(const BatchNode& node, const IteratorContext& ctx)
      : node_(node),
        input_(node.input_->MakeIterator(ctx)),
        stats_(ctx.runtime->Stats(node.options_.padded ? "padded_batch" : "batch")) {}
  absl::StatusOr<std::optional<Element>> GetNext() override {
    std::vector<Element> elements;
    while (static_cast<int64_t>(elements.size()) < node_.options_.size) {
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (!e) break;
      elements.push_back(std::move(*e));
    }
    if (elements.empty()) return std::nullopt;
    if (node_.options_.drop_remainder &&
        static_cast<int64_t>(elements.size()) < node_.options_.size) {
      return std::nullopt;
    }
    int64_t start = ThreadCpuNanos();
    ASSIGN_OR_RETURN(Element batch,
                     Collate(elements, node_.options_.padded, node_.options_.padding_value));
    stats_->busy_ns += ThreadCpuNanos() - start;
    stats_->elements += 1;
    stats_->bytes += static_cast<int64_t>(batch.ByteSize());
    return batch;
  }
  absl::StatusOr<json> Save() override { return input_->Save(); }
  absl::Status Restore(const json& state) override { return input_->Restore(state); }

 private:
  const BatchNode& node_;
  std::unique_ptr<Iterator> input_;
  StageStats* stats_;
};

std::unique_ptr<Iterator> BatchNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<BatchIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Bucket by length.

class BucketNode : public DatasetNode {
 public:
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  NodePtr input_;
  std::string field_;
  std::vector<int64_t> boundaries_, batch_sizes_;
  double padding_value_;
  bool drop_remainder_;
};

class BucketIterator : public ReplayIterator {
 public:
  BucketIterator(const BucketNode& node, const IteratorContext& ctx)
      : ReplayIterator(node.input_->MakeIterator(ctx)),
        node_(node),
        buckets_(node.batch_sizes_.size()) {}

 protected:
  absl::StatusOr<std::optional<Element>> Produce() override {
    while (!input_done_) {
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (!e) {
        input_done_ = true;
        break;
      }
      ASSIGN_OR_RETURN(const Tensor* t, e->Field(node_.field_));
      int64_t length = t->dtype == DType::kBytes ? static_cast<int64_t>(t->data.size())
                       : t->shape.empty()        ? 1
                                                 : t->shape[0];
      size_t b = std::upper_bound(node_.boundaries_.begin(), node_.boundaries_.end(), length) -
                 node_.boundaries_.begin();
      buckets_[b].push_back(std::move(*e));
      if (static_cast<int64_t>(buckets_[b].size()) == node_.batch_sizes_[b]) {
        std::vector<Element> full = std::move(buckets_[b]);
        buckets_[b].clear();
        return Collate(full, true, node_.padding_value_);
      }
    }
    // End of input: flush partial buckets in bucket order.
    while (flush_ < buckets_.size()) {
      std::vector<Element> partial = std::move(buckets_[flush_]);
      buckets_[flush_++].clear();
      if (!partial.empty() && !node_.drop_remainder_)
        return Collate(partial, true, node_.padding_value_);
    }
    return std::nullopt;
  }
  void Reset() override {
    for (auto& b : buckets_) b.clear();
    input_done_ = false;
    flush_ = 0;
  }

 private:
  const BucketNode& node_;
  std::vector<std::vector<Element>> buckets_;
  bool input_done_ = false;
  size_t flush_ = 0;
};

std::unique_ptr<Iterator> BucketNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<BucketIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Repeat, take, skip.

class RepeatNode : public DatasetNode {
 public:
  RepeatNode(NodePtr input, int64_t count) : input_(std::move(input)), count_(count) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override {
    auto n = input_->Cardinality();
    if (!n || count_ < 0) return std::nullopt;
    return *n * count_;
  }
  NodePtr input_;
  int64_t count_;
};

// Repetition k of the input runs as epoch (base epoch + k), so shuffles differ per repetition.
class RepeatIterator : public Iterator {
 public:
  RepeatIterator(const RepeatNode& node, const IteratorContext& ctx) : node_(node), ctx_(ctx) {}
  absl::StatusOr<std::optional<Element>> GetNext() override {
    while (node_.count_ < 0 || k_ < node_.count_) {
      if (!input_) Open();
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (e) {
        got_any_ = true;
        return e;
      }
      if (!got_any_) break;  // an empty input repeated forever is still empty
      ++k_;
      input_.reset();
      got_any_ = false;
    }
    return std::nullopt;
  }
  absl::StatusOr<json> Save() override {
    if (!input_) Open();
    ASSIGN_OR_RETURN(json inner, input_->Save());
    return json{{"k", k_}, {"input", inner}};
  }
  absl::Status Restore(const json& state) override {
    ASSIGN_OR_RETURN(k_, StateInt(state, "k"));
    ASSIGN_OR_RETURN(const json* inner, StateChild(state, "input"));
    Open();
    got_any_ = true;
    return input_->Restore(*inner);
  }

 private:
  void Open() {
    IteratorContext inner = ctx_;
    inner.epoch = ctx_.epoch + k_;
    input_ = node_.input_->MakeIterator(inner);
  }
  const RepeatNode& node_;
  IteratorContext ctx_;
  int64_t k_ = 0;
  bool got_any_ = false;
  std::unique_ptr<Iterator> input_;
};

std::unique_ptr<Iterator> RepeatNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<RepeatIterator>(*this, ctx);
}

class TakeSkipNode : public DatasetNode {
 public:
  TakeSkipNode(NodePtr input, int64_t count, bool take)
      : input_(std::move(input)), count_(count), take_(take) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override {
    auto n = input_->Cardinality();
    if (!n) return n;
    return take_ ? std::min(*n, count_) : std::max<int64_t>(0, *n - count_);
  }
  NodePtr input_;
  int64_t count_;
  bool take_;
};

class TakeSkipIterator : public Iterator {
 public:
  TakeSkipIterator(const TakeSkipNode& node, const IteratorContext& ctx)
      : node_(node), input_(node.input_->MakeIterator(ctx)) {}
  absl::StatusOr<std::optional<Element>> GetNext() override {
    if (node_.take_) {
      if (seen_ >= node_.count_) return std::nullopt;
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (e) ++seen_;
      return e;
    }
    while (seen_ < node_.count_) {
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (!e) return std::nullopt;
      ++seen_;
    }
    return input_->GetNext();
  }
  absl::StatusOr<json> Save() override {
    ASSIGN_OR_RETURN(json inner, input_->Save());
    return json{{"seen", seen_}, {"input", inner}};
  }
  absl::Status Restore(const json& state) override {
    ASSIGN_OR_RETURN(seen_, StateInt(state, "seen"));
    ASSIGN_OR_RETURN(const json* inner, StateChild(state, "input"));
    return input_->Restore(*inner);
  }

 private:
  const TakeSkipNode& node_;
  std::unique_ptr<Iterator> input_;
  int64_t seen_ = 0;  // taken, or skipped
};

std::unique_ptr<Iterator> TakeSkipNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<TakeSkipIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Prefetch: a producer thread runs the input ahead. The input is touched only by the producer
// while it runs; each queued element carries the input state after it, for Save().

class PrefetchNode : public DatasetNode {
 public:
  PrefetchNode(NodePtr input, int64_t buffer) : input_(std::move(input)), buffer_(buffer) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override { return input_->Cardinality(); }
  NodePtr input_;
  int64_t buffer_;
};

class PrefetchIterator : public Iterator {
 public:
  PrefetchIterator(const PrefetchNode& node, const IteratorContext& ctx)
      : node_(node),
        ctx_(ctx),
        input_(node.input_->MakeIterator(ctx)),
        stats_(ctx.runtime->Stats("prefetch")) {}
  ~PrefetchIterator() override { Stop(); }

  absl::StatusOr<std::optional<Element>> GetNext() override {
    if (!producer_.joinable() && !finished_) {
      ASSIGN_OR_RETURN(delivered_state_, input_->Save());
      Start();
    }
    if (finished_) return std::nullopt;
    Item item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PrefetchIterator* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return !p->queue_.empty(); },
          this));
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!item.result.ok() || !item.result->has_value()) {
      Stop();
      finished_ = true;
      return item.result;
    }
    delivered_state_ = std::move(item.state);
    return std::move(*item.result);
  }
  absl::StatusOr<json> Save() override {
    if (!producer_.joinable() && !finished_) return input_->Save();
    return delivered_state_;
  }
  absl::Status Restore(const json& state) override {
    Stop();
    finished_ = false;
    return input_->Restore(state);
  }

 private:
  struct Item {
    absl::StatusOr<std::optional<Element>> result = std::nullopt;
    json state;
  };

  int64_t Capacity() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (node_.buffer_ > 0) return node_.buffer_;
    // Autotuned: 2 by default, more if elements are small, never past a quarter of the budget.
    int64_t avg = std::max<int64_t>(1, stats_->bytes / std::max<int64_t>(1, stats_->elements));
    return std::clamp<int64_t>(ctx_.runtime->memory_budget_bytes() / 4 / avg, 1, 16);
  }

  void Start() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = false;
      queue_.clear();
    }
    producer_ = StartThread("stoker-prefetch", [this] {
      while (true) {
        {
          absl::MutexLock lock(&mu_);
          mu_.Await(absl::Condition(
              +[](PrefetchIterator* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
                return p->stop_ || static_cast<int64_t>(p->queue_.size()) < p->Capacity();
              },
              this));
          if (stop_) return;
        }
        Item item;
        item.result = input_->GetNext();
        bool last = !item.result.ok() || !item.result->has_value();
        if (!last) {
          auto state = input_->Save();
          item.state = state.ok() ? *state : json();
          stats_->elements += 1;
          stats_->bytes += static_cast<int64_t>((*item.result)->ByteSize());
        }
        absl::MutexLock lock(&mu_);
        queue_.push_back(std::move(item));
        if (last) return;
      }
    });
  }

  void Stop() {
    if (!producer_.joinable()) return;
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    producer_.join();
    absl::MutexLock lock(&mu_);
    queue_.clear();
  }

  const PrefetchNode& node_;
  IteratorContext ctx_;
  std::unique_ptr<Iterator> input_;
  StageStats* stats_;
  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread producer_;
  bool finished_ = false;
  json delivered_state_;
};

std::unique_ptr<Iterator> PrefetchNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<PrefetchIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Collate.

template <typename T>
void FillValue(uint8_t* dst, int64_t count, double value) {
  T v = static_cast<T>(value);
  T* p = reinterpret_cast<T*>(dst);
  std::fill(p, p + count, v);
}

// Copies a row-major tensor of shape `src` into a region of shape `dst` (each dim >= src's).
void CopyPadded(const uint8_t* src, const std::vector<int64_t>& src_shape, uint8_t* dst,
                const std::vector<int64_t>& dst_shape, size_t dim, size_t item) {
  if (dim + 1 >= src_shape.size()) {
    int64_t n = src_shape.empty() ? 1 : src_shape.back();
    std::memcpy(dst, src, n * item);
    return;
  }
  int64_t src_stride = item, dst_stride = item;
  for (size_t d = dim + 1; d < src_shape.size(); ++d) {
    src_stride *= src_shape[d];
    dst_stride *= dst_shape[d];
  }
  for (int64_t i = 0; i < src_shape[dim]; ++i) {
    CopyPadded(src + i * src_stride, src_shape, dst + i * dst_stride, dst_shape, dim + 1, item);
  }
}

std::string FieldNames(const Element& e) {
  std::string s;
  for (const auto& [n, t] : e.fields) s += StrCat(s.empty() ? "" : ", ", n);
  return s;
}

}  // namespace

absl::StatusOr<Element> Collate(std::vector<Element>& elements, bool padded, double padding_value) {
  Element out;
  if (elements.empty()) return out;
  const Element& first = elements.front();
  out.sample_index = first.sample_index;
  out.epoch = first.epoch;
  for (const Element& e : elements) {
    out.keys.insert(out.keys.end(), e.keys.begin(), e.keys.end());
    if (e.fields.size() != first.fields.size() ||
        !std::equal(e.fields.begin(), e.fields.end(), first.fields.begin(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      return absl::InvalidArgumentError(StrCat("batch: sample '", e.FirstKey(), "' has fields {",
                                               FieldNames(e), "} but sample '", first.FirstKey(),
                                               "' has {", FieldNames(first), "}"));
    }
  }
  const int64_t n = static_cast<int64_t>(elements.size());
  for (const auto& [name, t0] : first.fields) {
    std::vector<int64_t> shape = t0.shape;
    bool ragged = false;
    for (const Element& e : elements) {
      const Tensor& t = e.fields.at(name);
      if (t.dtype != t0.dtype) {
        return absl::InvalidArgumentError(StrCat(
            "batch: field '", name, "' is ", DTypeName(t.dtype), " in sample '", e.FirstKey(),
            "' but ", DTypeName(t0.dtype), " in sample '", first.FirstKey(), "'; add a cast"));
      }
      if (t.dtype == DType::kBytes) break;  // handled below
      if (t.shape.size() != shape.size()) {
        return absl::InvalidArgumentError(StrCat(
            "batch: field '", name, "' has rank ", t.shape.size(), " in sample '", e.FirstKey(),
            "' but rank ", shape.size(), " in sample '", first.FirstKey(), "'"));
      }
      for (size_t d = 0; d < shape.size(); ++d) {
        if (t.shape[d] != t0.shape[d]) ragged = true;
        shape[d] = std::max(shape[d], t.shape[d]);
      }
      if (ragged && !padded) {
        return absl::InvalidArgumentError(
            StrCat("batch: field '", name, "' is ragged: sample '", first.FirstKey(),
                   "' has shape ", t0.ShapeString(), " but sample '", e.FirstKey(), "' has ",
                   t.ShapeString(), "; resize or crop to one size, or use padded_batch"));
      }
    }
    if (t0.dtype == DType::kBytes) {
      // Undecoded labels (WebDataset ".cls": decimal text) become int64 [n]; other bytes cannot
      // be stacked.
      MutableBuffer labels(static_cast<size_t>(n) * sizeof(int64_t));
      for (int64_t i = 0; i < n; ++i) {
        auto v = ScalarAsInt(elements[i].fields.at(name));
        if (!v.ok()) {
          return absl::InvalidArgumentError(StrCat(
              "batch: field '", name, "' holds undecoded bytes (sample '", elements[i].FirstKey(),
              "'); decode it (decode_image, cast) or drop it (map_field) before batching"));
        }
        std::memcpy(labels.data() + i * sizeof(int64_t), &*v, sizeof(int64_t));
      }
      out.fields[name] = Tensor{DType::kInt64, {n}, std::move(labels).Finish()};
      continue;
    }
    const size_t item = DTypeSize(t0.dtype);
    int64_t per = item;
    for (int64_t d : shape) per *= d;
    UninitBuffer buf(static_cast<size_t>(per * n));
    if (ragged) {
      switch (t0.dtype) {
        case DType::kUint8:
          FillValue<uint8_t>(buf.data(), per * n, padding_value);
          break;
        case DType::kInt32:
          FillValue<int32_t>(buf.data(), per * n / 4, padding_value);
          break;
        case DType::kInt64:
          FillValue<int64_t>(buf.data(), per * n / 8, padding_value);
          break;
        case DType::kFloat32:
          FillValue<float>(buf.data(), per * n / 4, padding_value);
          break;
        case DType::kBytes:
          break;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const Tensor& t = elements[i].fields.at(name);
      if (!ragged) {
        std::memcpy(buf.data() + i * per, t.data.data(), per);
      } else if (t.NumValues() > 0) {
        CopyPadded(t.data.data(), t.shape, buf.data() + i * per, shape, 0, item);
      }
    }
    std::vector<int64_t> batched{n};
    batched.insert(batched.end(), shape.begin(), shape.end());
    out.fields[name] = Tensor{t0.dtype, std::move(batched), std::move(buf).Finish()};
  }
  return out;
}

NodePtr MakeIndexedSourceNode(std::shared_ptr<IndexedSource> source,
                              std::optional<uint64_t> shuffle_seed, bool reshuffle_each_epoch) {
  return std::make_shared<IndexedSourceNode>(std::move(source), shuffle_seed, reshuffle_each_epoch);
}
NodePtr MakeStreamSourceNode(std::shared_ptr<StreamSource> source,
                             std::optional<uint64_t> shard_shuffle_seed) {
  return std::make_shared<StreamSourceNode>(std::move(source), shard_shuffle_seed);
}
NodePtr MakeMapNode(NodePtr input, std::vector<MapStep> steps, int parallelism) {
  return std::make_shared<MapNode>(std::move(input), std::move(steps), parallelism);
}
NodePtr MakeShuffleBufferNode(NodePtr input, int64_t buffer_size, uint64_t seed,
                              bool reshuffle_each_epoch) {
  return std::make_shared<ShuffleBufferNode>(std::move(input), buffer_size, seed,
                                             reshuffle_each_epoch);
}
NodePtr MakeBatchNode(NodePtr input, BatchOptions options) {
  return std::make_shared<BatchNode>(std::move(input), options);
}
NodePtr MakeBucketByLengthNode(NodePtr input, std::string field, std::vector<int64_t> boundaries,
                               std::vector<int64_t> batch_sizes, double padding_value,
                               bool drop_remainder) {
  auto node = std::make_shared<BucketNode>();
  node->input_ = std::move(input);
  node->field_ = std::move(field);
  node->boundaries_ = std::move(boundaries);
  node->batch_sizes_ = std::move(batch_sizes);
  node->padding_value_ = padding_value;
  node->drop_remainder_ = drop_remainder;
  return node;
}
NodePtr MakeRepeatNode(NodePtr input, int64_t count) {
  return std::make_shared<RepeatNode>(std::move(input), count);
}
NodePtr MakeTakeNode(NodePtr input, int64_t count) {
  return std::make_shared<TakeSkipNode>(std::move(input), count, true);
}
NodePtr MakeSkipNode(NodePtr input, int64_t count) {
  return std::make_shared<TakeSkipNode>(std::move(input), count, false);
}
NodePtr MakePrefetchNode(NodePtr input, int64_t buffer) {
  return std::make_shared<PrefetchNode>(std::move(input), buffer);
}

// ---------------------------------------------------------------------------------------------

Runtime::Runtime(int threads, bool deterministic, int64_t memory_budget_bytes)
    : pool_("stoker-map", std::max(1, threads)),
      deterministic_(deterministic),
      memory_budget_bytes_(memory_budget_bytes) {}

StageStats* Runtime::Stats(const std::string& name) {
  absl::MutexLock lock(&mu_);
  for (auto& s : stats_) {
    if (s->name == name) return s.get();
  }
  stats_.push_back(std::make_unique<StageStats>());
  stats_.back()->name = name;
  return stats_.back().get();
}

std::vector<const StageStats*> Runtime::AllStats() const {
  absl::MutexLock lock(&mu_);
  std::vector<const StageStats*> out;
  for (const auto& s : stats_) out.push_back(s.get());
  return out;
}

}  // namespace stoker::data
