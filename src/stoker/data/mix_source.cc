#include "stoker/data/mix_source.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/random.h"

namespace stoker::data {
namespace {
// Salts of the mix's random draws, so that they are independent of each other and of the ops'.
constexpr uint64_t kRemainderSalt = 0x6d69782d72656dULL;  // which streams get the remainder
constexpr uint64_t kDrawSalt = 0x6d69782d647277ULL;       // a stream's samples
constexpr uint64_t kOrderSalt = 0x6d69782d6f7264ULL;      // the epoch's order
constexpr int64_t kMaxSamples = int64_t{1} << 50;
}  // namespace

absl::StatusOr<std::shared_ptr<MixSource>> MixSource::Create(std::vector<MixStream> streams,
                                                             const MixOptions& options) {
  if (streams.empty())
    return absl::InvalidArgumentError("$.source.mix: expected at least one stream");
  std::shared_ptr<MixSource> m(new MixSource);
  m->options_ = options;
  int64_t offset = 0, fixed_total = 0, weighted_size = 0;
  double weight_total = 0;
  for (size_t k = 0; k < streams.size(); ++k) {
    const MixStream& s = streams[k];
    const std::string at = StrCat("$.source.mix[", k, "]");
    const int64_t size = s.source->size();
    if (size <= 0) return absl::InvalidArgumentError(StrCat(at, ": the stream has no sample"));
    if (size > kMaxSamples)
      return absl::InvalidArgumentError(
          StrCat(at, ": ", size, " samples is more than a mix takes (2^50)"));
    int64_t fixed = 0;
    if (s.weight) {
      if (!(*s.weight > 0) || !std::isfinite(*s.weight))
        return absl::InvalidArgumentError(StrCat(at, ".weight: must be a positive number"));
      weight_total += *s.weight;
      weighted_size += size;
    } else if (s.repeat) {
      if (!(*s.repeat > 0) || *s.repeat > 1e6)
        return absl::InvalidArgumentError(StrCat(at, ".repeat: must be in (0, 1e6]"));
      const double count = std::floor(*s.repeat * static_cast<double>(size));
      if (count > static_cast<double>(kMaxSamples))
        return absl::InvalidArgumentError(StrCat(at, ".repeat: more than 2^50 samples an epoch"));
      fixed = static_cast<int64_t>(count);
    } else if (s.choose) {
      if (*s.choose < 0 || *s.choose > (int64_t{1} << 40))
        return absl::InvalidArgumentError(StrCat(at, ".choose: must be 0 .. 2^40"));
      fixed = *s.choose;
    } else {
      return absl::InvalidArgumentError(
          StrCat(at, ": give one of \"weight\", \"repeat\" or \"choose\""));
    }
    m->offsets_.push_back(offset);
    m->fixed_.push_back(fixed);
    offset += size;
    fixed_total += fixed;
  }
  const int64_t epoch_size = options.epoch_size.value_or(fixed_total + weighted_size);
  if (epoch_size > kMaxSamples || fixed_total > kMaxSamples)
    return absl::InvalidArgumentError("$.source.mix: more than 2^50 samples an epoch");
  const int64_t weighted = epoch_size - fixed_total;
  if (weighted < 0)
    return absl::InvalidArgumentError(StrCat("$.source.epoch_size: ", epoch_size,
                                             " is less than the streams' fixed quotas (repeat, "
                                             "choose): ",
                                             fixed_total));
  if (weighted > 0 && weight_total == 0)
    return absl::InvalidArgumentError(StrCat("$.source.epoch_size: ", epoch_size,
                                             " is more than the fixed quotas (", fixed_total,
                                             ") and no stream has a weight to fill the rest"));
  if (epoch_size <= 0) return absl::InvalidArgumentError("$.source.mix: the epoch is empty");
  for (size_t k = 0; k < streams.size(); ++k)
    if (streams[k].weight)
      m->fixed_[k] = static_cast<int64_t>(
          std::floor(static_cast<double>(weighted) * *streams[k].weight / weight_total));
  // Floating point may round a share up: never hand out more than the weighted part.
  int64_t sum = std::accumulate(m->fixed_.begin(), m->fixed_.end(), int64_t{0});
  for (size_t k = 0; sum > epoch_size && k < streams.size(); ++k)
    if (streams[k].weight && m->fixed_[k] > 0) --m->fixed_[k], --sum;
  m->epoch_size_ = epoch_size;
  m->streams_ = std::move(streams);
  return m;
}

std::vector<int64_t> MixSource::Quotas(int64_t epoch) const {
  std::vector<int64_t> q = fixed_;
  int64_t left = epoch_size_ - std::accumulate(q.begin(), q.end(), int64_t{0});
  // The remainder: one sample each to weighted streams drawn by weight, without replacement.
  std::vector<size_t> candidates;
  for (size_t k = 0; k < streams_.size(); ++k)
    if (streams_[k].weight) candidates.push_back(k);
  Rng rng(MixSeed({options_.seed, static_cast<uint64_t>(epoch), kRemainderSalt}));
  while (left > 0 && !candidates.empty()) {
    double total = 0;
    for (size_t k : candidates) total += *streams_[k].weight;
    double x = rng.Uniform() * total;
    size_t pick = candidates.size() - 1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      x -= *streams_[candidates[i]].weight;
      if (x < 0) {
        pick = i;
        break;
      }
    }
    ++q[candidates[pick]];
    candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
    --left;
  }
  return q;
}

std::vector<int64_t> MixSource::EpochIndices(int64_t epoch) const {
  const std::vector<int64_t> q = Quotas(epoch);
  const size_t k_count = streams_.size();
  // Each stream's draw: whole permutations of the stream for (seed, epoch, stream, pass).
  std::vector<std::vector<int64_t>> drawn(k_count);
  for (size_t k = 0; k < k_count; ++k) {
    const int64_t size = streams_[k].source->size();
    std::vector<int64_t> perm(static_cast<size_t>(size));
    for (int64_t pass = 0; static_cast<int64_t>(drawn[k].size()) < q[k]; ++pass) {
      std::iota(perm.begin(), perm.end(), offsets_[k]);
      Rng rng(MixSeed({options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(k),
                       static_cast<uint64_t>(pass), kDrawSalt}));
      for (int64_t i = size - 1; i > 0; --i)
        std::swap(perm[static_cast<size_t>(i)],
                  perm[static_cast<size_t>(rng.Below(static_cast<uint64_t>(i) + 1))]);
      const int64_t take = std::min<int64_t>(size, q[k] - static_cast<int64_t>(drawn[k].size()));
      drawn[k].insert(drawn[k].end(), perm.begin(), perm.begin() + take);
    }
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(epoch_size_));
  if (options_.stratified) {
    // Largest deficit first: position p goes to the stream furthest below its share of p + 1.
    std::vector<int64_t> taken(k_count, 0);
    const auto n = static_cast<__int128>(epoch_size_);
    for (int64_t p = 0; p < epoch_size_; ++p) {
      size_t best = k_count;
      __int128 best_deficit = 0;
      for (size_t k = 0; k < k_count; ++k) {
        if (taken[k] >= q[k]) continue;
        __int128 deficit =
            static_cast<__int128>(p + 1) * q[k] - static_cast<__int128>(taken[k]) * n;
        if (best == k_count || deficit > best_deficit) best = k, best_deficit = deficit;
      }
      out.push_back(drawn[best][static_cast<size_t>(taken[best]++)]);
    }
  } else {
    for (const auto& d : drawn) out.insert(out.end(), d.begin(), d.end());
    Rng rng(MixSeed({options_.seed, static_cast<uint64_t>(epoch), kOrderSalt}));
    for (int64_t i = epoch_size_ - 1; i > 0; --i)
      std::swap(out[static_cast<size_t>(i)],
                out[static_cast<size_t>(rng.Below(static_cast<uint64_t>(i) + 1))]);
  }
  return out;
}

absl::StatusOr<std::vector<Element>> MixSource::Read(std::span<const int64_t> indices) const {
  std::vector<Element> out;
  out.reserve(indices.size());
  const int64_t total = offsets_.back() + streams_.back().source->size();
  for (int64_t index : indices)
    if (index < 0 || index >= total)
      return absl::OutOfRangeError(StrCat("mix: sample index ", index, " is not 0 .. ", total - 1));
  size_t i = 0;
  while (i < indices.size()) {
    // A run of indices of one stream: one read of that stream.
    const auto stream = static_cast<size_t>(
        std::upper_bound(offsets_.begin(), offsets_.end(), indices[i]) - offsets_.begin() - 1);
    const int64_t base = offsets_[stream];
    const int64_t size = streams_[stream].source->size();
    std::vector<int64_t> local;
    for (; i < indices.size() && indices[i] >= base && indices[i] < base + size; ++i)
      local.push_back(indices[i] - base);
    ASSIGN_OR_RETURN(std::vector<Element> read, streams_[stream].source->Read(local));
    for (Element& e : read) {
      e.sample_index = static_cast<uint64_t>(base) + e.sample_index;
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace stoker::data
