// ServiceClient::Checkpoint: the token of what this consumer delivered in the current epoch
// (splits delivered in full as done ranges, partly delivered ones as open splits with their
// delivered sequences, coordinated jobs' rounds as positions). The token format itself is in
// checkpoint.h / checkpoint.cc.
#include <algorithm>

#include "stoker/core/strings.h"
#include "stoker/service/client/checkpoint.h"
#include "stoker/service/client/client.h"

namespace stoker::service {

absl::StatusOr<std::string> ServiceClient::Checkpoint() {
  absl::MutexLock lock(&mu_);
  if (options_.sharding != Sharding::kDynamic)
    return absl::FailedPreconditionError("checkpoints through the service need dynamic sharding");
  const bool coordinated = options_.num_consumers > 0;
  if (coordinated && position_batch_ == 0)
    return absl::FailedPreconditionError(
        "checkpoints of a coordinated job need a spec whose batches are consecutive samples "
        "(per-sample ops and one batch op: no filter, bucket_by_length, take, skip or repeat)");
  if (num_samples_ <= 0 && resume_samples_ <= 0 && (epoch_elements_ > 0 || !places_.empty())) {
    // Elements came before a heartbeat told the job's size: ask for one now.
    HeartbeatNowLocked();
    auto known = [&] { return num_samples_ > 0 || !error_.ok() || stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&known), absl::Seconds(10));
  }
  ServiceCheckpoint t;
  t.fingerprint = fingerprint_;
  t.spec = spec_;
  t.epoch = epoch_;
  t.num_samples = num_samples_ > 0 ? num_samples_ : resume_samples_;
  if (t.num_samples <= 0)
    return absl::UnavailableError(
        StrCat("job ", job_id_,
               ": no checkpoint yet: its size is not known before a worker "
               "opened its data"));
  if (auto it = done_.find(epoch_); it != done_.end()) t.done = it->second;
  auto add_open = [&](int64_t begin, int64_t end, const std::set<int64_t>& delivered) {
    ServiceCheckpoint::OpenSplit o{begin, end, {}};
    for (int64_t q : delivered) {
      if (!o.delivered.empty() && o.delivered.back().second == q)
        ++o.delivered.back().second;
      else
        o.delivered.emplace_back(q, q + 1);
    }
    t.open.push_back(std::move(o));
  };
  for (const auto& [id, place] : places_) {
    if (place.epoch != epoch_ || place.delivered.empty()) continue;
    if (coordinated) {
      // Rounds 0 .. r-1 of the split were delivered, in order, by every consumer (they step
      // together): its first r * num_consumers batches, which are consecutive samples. As
      // positions, the token restores onto any number of consumers.
      int64_t rounds = 0;
      while (place.delivered.count(rounds)) ++rounds;
      const int64_t end =
          std::min(place.end, place.begin + rounds * options_.num_consumers * position_batch_);
      if (end > place.begin) t.done.emplace_back(place.begin, end);
      continue;
    }
    add_open(place.begin, place.end, place.delivered);
  }
  t.done = MergeRanges(std::move(t.done));
  // Open splits of the token resumed from that this job has not sent yet.
  if (epoch_ == resume_epoch_)
    for (const auto& [range, delivered] : resumed_open_)
      if (!delivered.empty()) add_open(range.first, range.second, delivered);
  std::sort(t.open.begin(), t.open.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  t.elements = epoch_elements_;
  t.samples = epoch_samples_;
  return t.ToJson();
}

}  // namespace stoker::service
