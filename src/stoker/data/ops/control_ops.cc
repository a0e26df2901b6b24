// Control ops: repeat, take, skip, and prefetch (a producer thread running the input ahead).
#include <algorithm>
#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "stoker/core/thread.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/ops.h"
#include "stoker/data/ops/builtin_ops.h"
#include "stoker/data/ops/op_util.h"

namespace stoker::data {
namespace {

using ops_internal::json;
using ops_internal::StateChild;
using ops_internal::StateInt;

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

}  // namespace

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

void RegisterControlOps() {
  (void)RegisterDatasetOp("repeat",
                          [](ParamReader& p, const OpContext& ctx) -> absl::StatusOr<NodePtr> {
                            int64_t count = p.Int("count", -1, -1);
                            RETURN_IF_ERROR(p.Finish());
                            return MakeRepeatNode(ctx.input(), count);
                          },
                          {.count = CountEffect::kRepeats});
  auto take_skip = [](ParamReader& p, const OpContext& ctx) -> absl::StatusOr<NodePtr> {
    int64_t count = p.Int("count", std::nullopt, 0);
    RETURN_IF_ERROR(p.Finish());
    return ctx.name == "take" ? MakeTakeNode(ctx.input(), count) : MakeSkipNode(ctx.input(), count);
  };
  (void)RegisterDatasetOp("take", take_skip, {.count = CountEffect::kTakes});
  (void)RegisterDatasetOp("skip", take_skip, {.count = CountEffect::kSkips});
  (void)RegisterDatasetOp("prefetch",
                          [](ParamReader& p, const OpContext& ctx) -> absl::StatusOr<NodePtr> {
                            int64_t buffer = p.Int("buffer", 0, 0, 1 << 20);
                            RETURN_IF_ERROR(p.Finish());
                            return MakePrefetchNode(ctx.input(), buffer);
                          },
                          {.count = CountEffect::kKeeps});
}

}  // namespace stoker::data
