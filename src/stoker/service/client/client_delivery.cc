// The service client's delivery: Accept records a received element once (dropping duplicates by
// stream index and by split and sequence), TakeNext hands out the next one (in the job's global
// order, or as it arrived), MaybeAck and Delivered acknowledge a split once all its elements
// were delivered, and GetNext, GetNextHost and AdvanceEpoch are what the trainer calls.
#include <utility>

#include "stoker/core/status.h"
#include "stoker/service/client/checkpoint.h"
#include "stoker/service/client/client.h"
#include "stoker/service/common/element_codec.h"

namespace stoker::service {

void ServiceClient::MaybeAck(int64_t split) {
  auto it = splits_.find(split);
  if (it == splits_.end()) return;
  const SplitProgress& p = it->second;
  if (p.last < 0 || static_cast<int64_t>(p.sequences.size()) != p.last + 1 || p.undelivered > 0)
    return;
  complete_.insert(split);
  splits_.erase(it);
  if (auto place = places_.find(split); place != places_.end()) {
    auto& done = done_[place->second.epoch];
    done.emplace_back(place->second.begin, place->second.end);
    done = MergeRanges(std::move(done));
    places_.erase(place);
  }
  to_ack_.push_back(split);
  ++stats_.splits;
}

void ServiceClient::Delivered(int64_t split) {
  auto it = splits_.find(split);
  if (it == splits_.end()) return;
  --it->second.undelivered;
  MaybeAck(split);
}

bool ServiceClient::Accept(Fetcher* f, ElementData* d, EncodedElement payload) {
  // Once per index of the worker's stream (a restart may send some again).
  if (d->index() < f->received_below || !f->received_above.insert(d->index()).second) return false;
  while (!f->received_above.empty() && *f->received_above.begin() == f->received_below) {
    f->received_above.erase(f->received_above.begin());
    ++f->received_below;
  }
  if (d->split_id() < 0) {  // sharding off: each worker's stream is its own
    if (d->empty()) return true;
    ready_bytes_ += static_cast<int64_t>(payload.size);
    fifo_.push_back(std::move(payload));
    return true;
  }
  // Once per (split, sequence): a split re-served by another worker yields the same elements.
  if (complete_.count(d->split_id())) return false;
  SplitProgress& p = splits_[d->split_id()];
  if (!p.sequences.insert(d->sequence()).second) return false;
  if (d->last()) p.last = d->sequence();
  auto place = places_.find(d->split_id());
  if (place == places_.end()) {
    SplitPlace sp{d->epoch(), d->begin(), d->end(), {}};
    if (d->epoch() == resume_epoch_) {
      // A split the resumed token's consumer delivered in part, run again exactly.
      if (auto r = resumed_open_.find({d->begin(), d->end()}); r != resumed_open_.end()) {
        sp.delivered = std::move(r->second);
        resumed_open_.erase(r);
      }
    }
    place = places_.emplace(d->split_id(), std::move(sp)).first;
  }
  // Delivered before the checkpoint this client resumed from: only marks its place in order.
  // A skipped element (cross-trainer cache, on_fall_behind skip) only marks its place too.
  const bool empty = d->empty() || d->skipped() || place->second.delivered.count(d->sequence()) > 0;
  // An epoch this consumer moved past (AdvanceEpoch) is discarded as it arrives. In order, the
  // expected pointer must still pass over it, so ordered clients keep it until its turn.
  const bool stale = d->epoch() < epoch_ && !ordered();
  if (!empty && !stale) ++p.undelivered;
  if (!stale && (!empty || ordered())) {
    Item item;
    item.epoch = d->epoch();
    item.last = d->last();
    item.empty = empty;
    if (!empty) item.payload = std::move(payload);
    ready_bytes_ += static_cast<int64_t>(item.payload.size);
    items_[{d->split_id(), d->sequence()}] = std::move(item);
  }
  MaybeAck(d->split_id());
  return true;
}

std::optional<ServiceClient::Item> ServiceClient::TakeNext(bool* epoch_over) {
  *epoch_over = false;
  if (options_.sharding == Sharding::kOff) {
    if (fifo_.empty()) {
      *epoch_over = finished_;
      return std::nullopt;
    }
    Item item;
    item.payload = std::move(fifo_.front());
    fifo_.pop_front();
    ready_bytes_ -= static_cast<int64_t>(item.payload.size);
    return item;
  }
  while (!items_.empty()) {
    auto it = items_.begin();
    if (ordered() && it->first != expected_) break;  // the next in order is not here yet
    if (it->second.epoch > epoch_) break;            // the next epoch's: held back
    Item item = std::move(it->second);
    const auto [split, sequence] = it->first;
    items_.erase(it);
    ready_bytes_ -= static_cast<int64_t>(item.payload.size);
    if (ordered())
      expected_ =
          item.last ? std::make_pair(split + 1, int64_t{0}) : std::make_pair(split, sequence + 1);
    if (item.empty) continue;
    if (auto place = places_.find(split); place != places_.end())
      place->second.delivered.insert(sequence);
    Delivered(split);
    if (item.epoch < epoch_) continue;  // an epoch the consumer moved past
    return item;
  }
  // Nothing of this epoch is here. It is over once the dispatcher says every split of it was
  // delivered (by whichever consumer), or in order, once the next split is of a later epoch.
  bool next_is_later = ordered() && !items_.empty() && items_.begin()->first == expected_ &&
                       items_.begin()->second.epoch > epoch_;
  *epoch_over = finished_ || epochs_done_ > epoch_ || next_is_later;
  return std::nullopt;
}

absl::StatusOr<std::optional<data::Element>> ServiceClient::GetNext(absl::Duration wait) {
  const auto called = std::chrono::steady_clock::now();
  auto host = GetNextHost(wait);
  {
    absl::MutexLock lock(&mu_);
    const auto now = std::chrono::steady_clock::now();
    if (last_return_)
      stats_.between_seconds += std::chrono::duration<double>(called - *last_return_).count();
    stats_.wait_seconds += std::chrono::duration<double>(now - called).count();
    if (stats_.first_wait_seconds == 0 && stats_.elements > 0)
      stats_.first_wait_seconds = std::max(stats_.wait_seconds, 1e-9);
    last_return_ = now;
    if (stats_.elements == kFirstLookElements && host.ok()) HeartbeatNowLocked();
  }
  ASSIGN_OR_RETURN(std::optional<data::Element> e, std::move(host));
  if (!e || !device_stage_) return e;
  auto on_device = device_stage_->Apply(*std::move(e));
  if (!on_device.ok()) return Annotate(on_device.status(), "to_device at the service consumer");
  return *std::move(on_device);
}

absl::StatusOr<std::optional<data::Element>> ServiceClient::GetNextHost(absl::Duration wait) {
  EncodedElement payload;
  {
    absl::MutexLock lock(&mu_);
    auto deadline = absl::Now() + wait;
    while (true) {
      if (!error_.ok()) return error_;
      bool epoch_over = false;
      std::optional<Item> item = TakeNext(&epoch_over);
      if (item) {
        payload = std::move(item->payload);
        break;
      }
      if (epoch_over) {
        blocked_ = false;
        return std::optional<data::Element>();
      }
      // Starved with acknowledgements pending: they may end the epoch or the job, so the
      // heartbeat goes out now.
      if (!to_ack_.empty()) HeartbeatNowLocked();
      blocked_ = true;
      size_t held = items_.size() + fifo_.size();
      bool was_finished = finished_;
      int64_t done = epochs_done_;
      auto changed = [&] {
        return !error_.ok() || items_.size() + fifo_.size() != held || finished_ != was_finished ||
               epochs_done_ != done;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&changed), deadline) && absl::Now() >= deadline) {
        blocked_ = false;
        return absl::DeadlineExceededError("no element yet");
      }
    }
    blocked_ = false;
    ++stats_.elements;
    ++epoch_elements_;
    stats_.bytes += static_cast<int64_t>(payload.size);
  }
  ASSIGN_OR_RETURN(data::Element e, DecodeElement(payload.pieces));
  {
    absl::MutexLock lock(&mu_);
    epoch_samples_ += static_cast<int64_t>(e.keys.size());
  }
  return std::optional<data::Element>(std::move(e));
}

bool ServiceClient::AdvanceEpoch() {
  absl::MutexLock lock(&mu_);
  if (epoch_ + 1 >= first_epoch_ + num_epochs_) return false;
  ++epoch_;
  epoch_elements_ = 0;
  epoch_samples_ = 0;
  if (!ordered()) {
    // What is held of earlier epochs is discarded, and acknowledged as delivered.
    for (auto it = items_.begin(); it != items_.end() && it->second.epoch < epoch_;) {
      ready_bytes_ -= static_cast<int64_t>(it->second.payload.size);
      int64_t split = it->first.first;
      it = items_.erase(it);
      Delivered(split);
    }
  }
  return true;
}

}  // namespace stoker::service
