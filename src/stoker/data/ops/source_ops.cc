// Source nodes: the first node of every graph, reading an indexed source (in order, a permutation,
// or the splits of a provider) or a stream source (shard by shard).
#include <algorithm>
#include <deque>
#include <numeric>

#include "stoker/data/ops.h"
#include "stoker/data/ops/op_util.h"
#include "stoker/data/random.h"

namespace stoker::data {
namespace {

using ops_internal::BadState;
using ops_internal::json;
using ops_internal::StateInt;
using ops_internal::ThreadCpuNanos;

// ---------------------------------------------------------------------------------------------
// Indexed source: reads the (optionally permuted) index order in chunks of kReadChunk samples, so
// the source can turn them into few large reads, and keeps up to read_ahead chunks in flight
// (IndexedSource::StartRead), so a store with a long time to first byte is read at the rate of
// several requests, not one. Chunks are returned strictly in position order: read-ahead changes
// when bytes are fetched, never which elements come out or in what order.
//
// Autotuned read-ahead (read_ahead 0): starts at 2 chunks and doubles each time the consumer had
// to wait for a chunk's bytes, up to kMaxReadAhead and to a quarter of the memory budget's worth of
// chunks (at the measured element size); it is lowered when that memory bound drops below it.

constexpr int64_t kReadChunk = 32;
constexpr int kMaxReadAhead = 16;

class IndexedSourceNode : public DatasetNode {
 public:
  IndexedSourceNode(std::shared_ptr<IndexedSource> source, std::optional<uint64_t> seed,
                    bool reshuffle, int read_ahead)
      : source_(std::move(source)), seed_(seed), reshuffle_(reshuffle), read_ahead_(read_ahead) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override { return source_->size(); }

  std::shared_ptr<IndexedSource> source_;
  std::optional<uint64_t> seed_;
  bool reshuffle_;
  int read_ahead_;  // chunks in flight; 0: autotuned
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
    // A source whose samples depend on the epoch (a mix): positions map to its epoch's samples.
    std::vector<int64_t> epoch_indices = node.source_->EpochIndices(ctx.epoch);
    if (!epoch_indices.empty()) {
      if (order_.empty()) {
        order_ = std::move(epoch_indices);
      } else {
        for (int64_t& i : order_) i = epoch_indices[static_cast<size_t>(i)];
      }
    }
    read_ahead_ = node.read_ahead_ > 0 ? node.read_ahead_ : 2;
    stats_->parallelism = read_ahead_;
  }

  absl::StatusOr<std::optional<Element>> GetNext() override {
    const int64_t n = node_.source_->size();
    if (!split_) split_ = ctx_.splits ? Split{0, 0} : Split{0, n};
    while (ahead_.empty()) {
      // The next split is asked for only when everything of the current one has been returned.
      while (chunks_.empty() && pos_ >= split_->end) {
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
      StartReads();
      Chunk chunk = std::move(chunks_.front());
      chunks_.pop_front();
      int64_t start = ThreadCpuNanos();
      absl::StatusOr<std::vector<Element>> read = chunk.read->Wait();
      stats_->busy_ns += ThreadCpuNanos() - start;
      Autotune(chunk.read->waited_for_io());
      RETURN_IF_ERROR(read.status());
      StartReads();
      // A source may leave out samples it skipped (corrupt records): match by sample index so
      // positions stay exact.
      size_t j = 0;
      for (int64_t i = chunk.begin; i < chunk.end && j < read->size(); ++i) {
        if ((*read)[j].sample_index != static_cast<uint64_t>(chunk.indices[i - chunk.begin])) {
          continue;
        }
        Element& e = (*read)[j++];
        e.epoch = ctx_.epoch;
        stats_->elements += 1;
        stats_->bytes += static_cast<int64_t>(e.ByteSize());
        ahead_.emplace_back(i, std::move(e));
      }
      stats_->skipped += static_cast<int64_t>(chunk.indices.size() - j);  // on_corrupt: skip
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
    chunks_.clear();  // waits for the reads in flight
    ahead_.clear();
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
    return absl::OkStatus();
  }

 private:
  struct Chunk {
    int64_t begin = 0, end = 0;    // positions
    std::vector<int64_t> indices;  // sample indices of positions [begin, end)
    std::unique_ptr<PendingRead> read;
  };

  // Starts reads of the next chunks of the current split until read_ahead_ are in flight.
  void StartReads() {
    while (static_cast<int>(chunks_.size()) < read_ahead_ && pos_ < split_->end) {
      Chunk chunk;
      chunk.begin = pos_;
      chunk.end = std::min(split_->end, pos_ + kReadChunk);
      for (int64_t i = chunk.begin; i < chunk.end; ++i) {
        chunk.indices.push_back(order_.empty() ? i : order_[i]);
      }
      chunk.read = node_.source_->StartRead(chunk.indices, &ctx_.runtime->pool());
      pos_ = chunk.end;
      chunks_.push_back(std::move(chunk));
    }
  }

  void Autotune(bool waited_for_io) {
    if (node_.read_ahead_ > 0) return;
    const int64_t elements = stats_->elements;
    const int64_t avg_bytes = elements > 0 ? std::max<int64_t>(1, stats_->bytes / elements) : 1;
    const int64_t memory_bound = std::clamp<int64_t>(
        ctx_.runtime->memory_budget_bytes() / 4 / (avg_bytes * kReadChunk), 1, kMaxReadAhead);
    if (waited_for_io) read_ahead_ = std::min<int64_t>(2 * read_ahead_, kMaxReadAhead);
    read_ahead_ = static_cast<int>(std::min<int64_t>(read_ahead_, memory_bound));
    stats_->parallelism = read_ahead_;
  }

  const IndexedSourceNode& node_;
  IteratorContext ctx_;
  StageStats* stats_;
  std::vector<int64_t> order_;  // empty: identity
  std::optional<Split> split_;  // positions being read (the whole epoch without a provider)
  int64_t pos_ = 0;             // next position to start reading
  int64_t delivered_ = 0;       // position after the last element returned
  int read_ahead_ = 1;          // chunks in flight now
  std::deque<std::pair<int64_t, Element>> ahead_;  // read, not yet returned, with positions
  std::deque<Chunk> chunks_;                       // reads in flight, in position order
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
      const int64_t skipped_before = stream_->skipped();
      ASSIGN_OR_RETURN(std::optional<Element> e, stream_->Next());
      stats_->skipped += stream_->skipped() - skipped_before;  // on_corrupt: skip
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
  std::unique_ptr<ElementStream> stream_;
};

std::unique_ptr<Iterator> StreamSourceNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<StreamSourceIterator>(*this, ctx);
}

}  // namespace

NodePtr MakeIndexedSourceNode(std::shared_ptr<IndexedSource> source,
                              std::optional<uint64_t> shuffle_seed, bool reshuffle_each_epoch,
                              int read_ahead) {
  return std::make_shared<IndexedSourceNode>(std::move(source), shuffle_seed, reshuffle_each_epoch,
                                             read_ahead);
}
NodePtr MakeStreamSourceNode(std::shared_ptr<StreamSource> source,
                             std::optional<uint64_t> shard_shuffle_seed) {
  return std::make_shared<StreamSourceNode>(std::move(source), shard_shuffle_seed);
}

}  // namespace stoker::data
