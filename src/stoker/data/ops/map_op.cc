// The parallel map stage that runs fused element-wise ops (transforms) on the runtime's pool.
#include <algorithm>
#include <deque>

#include "absl/synchronization/mutex.h"
#include "stoker/data/ops.h"
#include "stoker/data/ops/op_util.h"
#include "stoker/data/random.h"

namespace stoker::data {
namespace {

using ops_internal::Clock;
using ops_internal::json;
using ops_internal::NanosSince;
using ops_internal::ThreadCpuNanos;

// ---------------------------------------------------------------------------------------------
// Parallel map. The consumer thread pulls input elements and schedules the fused steps on the
// shared pool, keeping up to `limit_` in flight; results are returned in input order
// (deterministic) or as they complete. Each slot remembers the input's state right after its
// element was pulled, so Save() can describe "after the last element returned" exactly.

class MapNode : public DatasetNode {
 public:
  MapNode(NodePtr input, std::vector<MapStep> steps, int parallelism, int64_t batch_size)
      : input_(std::move(input)),
        steps_(std::move(steps)),
        parallelism_(parallelism),
        batch_size_(batch_size),
        slot_writer_(batch_size > 0 ? dynamic_cast<const SlotWriter*>(steps_.back().transform.get())
                                    : nullptr) {
    if (slot_writer_ != nullptr && slot_writer_->slot_bytes() == 0) slot_writer_ = nullptr;
  }
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;

  NodePtr input_;
  std::vector<MapStep> steps_;
  int parallelism_;
  int64_t batch_size_;
  const SlotWriter* slot_writer_;  // the last step, when its output goes into batch slots
};

// Where the last step writes its output: a slot of the batch buffer being filled.
struct OutputSlot {
  uint8_t* data = nullptr;
  Buffer view;
};

absl::StatusOr<std::optional<Element>> RunSteps(const std::vector<MapStep>& steps,
                                                const std::vector<StageStats*>& stats, Element e,
                                                const SlotWriter* writer, OutputSlot slot) {
  for (size_t i = 0; i < steps.size(); ++i) {
    int64_t start = ThreadCpuNanos();
    Rng rng(MixSeed({steps[i].seed, static_cast<uint64_t>(e.epoch), e.sample_index}));
    std::string key = e.FirstKey();
    auto result = writer != nullptr && i + 1 == steps.size()
                      ? writer->ApplyInto(std::move(e), rng, slot.data, std::move(slot.view))
                      : steps[i].transform->Apply(std::move(e), rng);
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
          batch_buffer_ = Buffer();  // not kept for a next epoch through this iterator
          if (in.ok()) break;
          slot->result = in.status();
          slot->done = true;
          slots_.push_back(slot);
          break;
        }
        auto state = input_->Save();
        slot->input_state = state.ok() ? *state : json();
        slots_.push_back(slot);
        Schedule(slot, std::move(**in), NextOutputSlot());
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
    batch_buffer_ = Buffer();  // the next batch starts a new buffer
    batch_used_ = 0;
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

  void Schedule(std::shared_ptr<Slot> slot, Element e, OutputSlot output) {
    {
      absl::MutexLock lock(&shared_->mu);
      ++shared_->in_flight;
    }
    ctx_.runtime->pool().Schedule(
        [this, slot, shared = shared_, e = std::move(e), output = std::move(output)]() mutable {
          auto result =
              RunSteps(node_.steps_, stats_, std::move(e), node_.slot_writer_, std::move(output));
          absl::MutexLock lock(&shared->mu);
          slot->result = std::move(result);
          slot->done = true;
          --shared->in_flight;
        });
  }

  // The next slot of the batch buffer, in input order (so a batch that drops no element finds
  // its elements back to back); a new buffer when the current one is full.
  OutputSlot NextOutputSlot() {
    if (node_.slot_writer_ == nullptr) return {};
    const size_t bytes = node_.slot_writer_->slot_bytes();
    if (batch_buffer_.empty() || batch_used_ == node_.batch_size_) {
      UninitBuffer buffer(bytes * static_cast<size_t>(node_.batch_size_));
      batch_base_ = buffer.data();
      batch_buffer_ = std::move(buffer).Finish();
      batch_used_ = 0;
    }
    const size_t offset = bytes * static_cast<size_t>(batch_used_++);
    OutputSlot slot{batch_base_ + offset, batch_buffer_.Slice(offset, bytes)};
    // Full: only its slots hold it now, so it goes back to the pool with the batch.
    if (batch_used_ == node_.batch_size_) batch_buffer_ = Buffer();
    return slot;
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
  Buffer batch_buffer_;                  // the batch buffer being filled (slot_writer_ only)
  uint8_t* batch_base_ = nullptr;        // its first byte, writable by the slot's task only
  int64_t batch_used_ = 0;               // its slots handed out
  int limit_;
  int max_limit_;
  int window_count_ = 0;
  int64_t window_wait_ns_ = 0;
  Clock::time_point window_start_ = Clock::now();
};

std::unique_ptr<Iterator> MapNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<MapIterator>(*this, ctx);
}

}  // namespace

NodePtr MakeMapNode(NodePtr input, std::vector<MapStep> steps, int parallelism,
                    int64_t batch_size) {
  return std::make_shared<MapNode>(std::move(input), std::move(steps), parallelism, batch_size);
}

}  // namespace stoker::data
