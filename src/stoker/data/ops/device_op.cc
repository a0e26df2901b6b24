// The to_device op (to_device.h, docs/gpu.md): the last op, moving batches to a CUDA GPU.
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/ops.h"
#include "stoker/data/ops/builtin_ops.h"
#include "stoker/data/ops/op_util.h"
#include "stoker/data/random.h"
#include "stoker/data/to_device.h"

namespace stoker::data {

namespace {

using namespace ops_internal;  // NOLINT(build/namespaces)

class ToDeviceNode : public DatasetNode {
 public:
  ToDeviceNode(NodePtr input, ToDeviceOptions options, uint64_t seed)
      : input_(std::move(input)), options_(std::move(options)), seed_(seed) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override { return input_->Cardinality(); }

  NodePtr input_;
  ToDeviceOptions options_;
  uint64_t seed_;
};

// Stateless apart from its input: the stage's random choices come from each element.
class ToDeviceIterator : public Iterator {
 public:
  ToDeviceIterator(const ToDeviceNode& node, const IteratorContext& ctx)
      : node_(node),
        input_(node.input_->MakeIterator(ctx)),
        stats_(ctx.runtime->Stats("to_device")) {}

  absl::StatusOr<std::optional<Element>> GetNext() override {
    if (!stage_) {
      auto stage = DeviceStage::Create(node_.options_, node_.seed_);
      if (!stage.ok()) return Annotate(stage.status(), "to_device");
      stage_ = *std::move(stage);
    }
    ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
    if (!e) return std::nullopt;
    const int64_t start = ThreadCpuNanos();
    auto out = stage_->Apply(*std::move(e));
    stats_->busy_ns += ThreadCpuNanos() - start;
    if (!out.ok()) return Annotate(out.status(), "to_device");
    stats_->elements += 1;
    stats_->bytes += static_cast<int64_t>(out->ByteSize());
    return *std::move(out);
  }
  absl::StatusOr<json> Save() override { return input_->Save(); }
  absl::Status Restore(const json& state) override { return input_->Restore(state); }

 private:
  const ToDeviceNode& node_;
  std::unique_ptr<Iterator> input_;
  StageStats* stats_;
  std::unique_ptr<DeviceStage> stage_;
};

std::unique_ptr<Iterator> ToDeviceNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<ToDeviceIterator>(*this, ctx);
}

absl::StatusOr<NodePtr> MakeToDeviceOp(ParamReader& p, const OpContext& context) {
  ToDeviceOptions options = ParseToDeviceOptions(p);
  if (!context.last) {
    p.Fail("op",
           "to_device must be the last op: it hands device memory to the consumer, which no "
           "later op could read");
  }
  RETURN_IF_ERROR(p.Finish());
  if (!CudaBuilt()) {
    return absl::FailedPreconditionError(
        StrCat(p.path(),
               ": to_device needs stoker built with CUDA (-DSTOKER_CUDA=ON, see docs/gpu.md); "
               "this build has none. Without it, end the pipeline with batch and copy the "
               "(uint8) batches to the GPU in the trainer"));
  }
  const int64_t ahead = options.in_flight;
  NodePtr node = std::make_shared<ToDeviceNode>(context.input(), std::move(options),
                                                MixSeed({context.pipeline_seed, context.index}));
  // A producer thread keeps `in_flight` batches queued (their copies overlap the consumer's
  // work); it also records the checkpoint state of each.
  return MakePrefetchNode(std::move(node), ahead);
}

}  // namespace

void RegisterDeviceOp() {
  (void)RegisterDatasetOp("to_device", MakeToDeviceOp, {.count = CountEffect::kKeeps});
}

}  // namespace stoker::data
