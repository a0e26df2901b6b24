// shuffle: a buffer of `buffer` elements, one drawn at random per call (or, directly on the source,
// the source's own permutation).
#include <vector>

#include "stoker/data/op_registry.h"
#include "stoker/data/ops.h"
#include "stoker/data/ops/builtin_ops.h"
#include "stoker/data/ops/op_util.h"
#include "stoker/data/random.h"

namespace stoker::data {
namespace {

using ops_internal::ReplayIterator;

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

}  // namespace

NodePtr MakeShuffleBufferNode(NodePtr input, int64_t buffer_size, uint64_t seed,
                              bool reshuffle_each_epoch) {
  return std::make_shared<ShuffleBufferNode>(std::move(input), buffer_size, seed,
                                             reshuffle_each_epoch);
}

void RegisterShuffleOp() {
  (void)RegisterDatasetOp(
      "shuffle",
      [](ParamReader& p, const OpContext& ctx) -> absl::StatusOr<NodePtr> {
        uint64_t s =
            static_cast<uint64_t>(p.Int("seed", static_cast<int64_t>(ctx.pipeline_seed), 0));
        int64_t buffer = p.Int("buffer", 1024, 1, int64_t{1} << 30);
        bool reshuffle = p.Bool("reshuffle_each_epoch", true);
        RETURN_IF_ERROR(p.Finish());
        if (ctx.at_source) {
          // Directly on the source: a full permutation (indexed) or a shard-order shuffle (stream)
          // followed by a buffer.
          NodePtr source = ctx.source(MixSeed({s, 0x5ca1ab1e}), reshuffle);
          if (!ctx.stream_source) return source;
          return MakeShuffleBufferNode(source, buffer, MixSeed({s, ctx.index}), reshuffle);
        }
        return MakeShuffleBufferNode(ctx.input(), buffer, MixSeed({s, ctx.index}), reshuffle);
      },
      {.count = CountEffect::kKeeps});
}

}  // namespace stoker::data
