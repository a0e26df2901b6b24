#include "stoker/io/read/ranged_reader.h"

#include <algorithm>
#include <array>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "stoker/core/blocking.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/io/range_util.h"
#include "stoker/io/read/range_plan.h"

namespace stoker::io {
namespace {

std::string RangeText(ByteRange r) {
  if (r.length == ByteRange::kToEnd) return StrCat("bytes ", r.offset, "-end");
  return StrCat("bytes [", r.offset, ", ", r.offset + r.length, ")");
}

using DoneFn = absl::AnyInvocable<void(absl::StatusOr<std::vector<Buffer>>) &&>;

// The call whose requests this thread is issuing to the store right now: an answer that arrives
// on this thread while it is (a cache hit, a memory store) came back inside the call and is no
// latency sample of the store.
thread_local const void* tls_issuing = nullptr;
class IssuingScope {
 public:
  explicit IssuingScope(const void* call) : saved_(tls_issuing) { tls_issuing = call; }
  ~IssuingScope() { tls_issuing = saved_; }
  IssuingScope(const IssuingScope&) = delete;
  IssuingScope& operator=(const IssuingScope&) = delete;

 private:
  const void* saved_;
};

}  // namespace

// One ReadRangesAsync call: its plan, its parts and their results. Shared by the store callbacks
// of its parts and the hedge timer; lives until the last of them lets go.
struct ReadCall {
  static constexpr uint64_t kUnknownSize = ~uint64_t{0};
  struct Part {
    ByteRange range;
    size_t fetch = 0;
    int attempts_pending = 0;  // store requests of this part not yet answered (1, or 2 if hedged)
    bool hedged = false;
    bool done = false;
    Buffer data;
  };

  std::string key;
  std::string url;
  std::string if_match;
  std::vector<ByteRange> ranges;
  CoalescedPlan plan;
  uint64_t known_size = kUnknownSize;  // set when the caller Stat'ed the object
  DoneFn done;

  absl::Mutex mu;
  std::vector<Part> parts ABSL_GUARDED_BY(mu);
  size_t next_part ABSL_GUARDED_BY(mu) = 0;
  int in_flight ABSL_GUARDED_BY(mu) = 0;      // parts issued and not yet done
  size_t parts_left ABSL_GUARDED_BY(mu) = 0;  // parts not yet done
  bool pumping ABSL_GUARDED_BY(mu) = false;   // some thread is issuing parts
  bool finished ABSL_GUARDED_BY(mu) = false;  // `done` was (or is being) called
};

class RangedReader::Impl {
 public:
  Impl(std::shared_ptr<ObjectStore> store, ReaderOptions options)
      : store_(std::move(store)), options_(options) {
    for (auto& tracker : trackers_) {
      tracker = std::make_unique<LatencyTracker>(LatencyTracker::Options{
          options.hedge_multiple, options.hedge_floor, options.hedge_min_samples});
    }
    options_.max_parts_in_flight = std::max(1, options_.max_parts_in_flight);
    options_.part_size = std::max<uint64_t>(1, options_.part_size);
  }

  ~Impl() {
    std::thread timer;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      cv_.SignalAll();
      timer = std::move(timer_);
    }
    if (timer.joinable()) timer.join();
    absl::MutexLock lock(&mu_);
    while (outstanding_ > 0) idle_.Wait(&mu_);
  }

  void Start(std::shared_ptr<ReadCall> call);

  const std::shared_ptr<ObjectStore> store_;
  ReaderOptions options_;

  // Latency grows with request size, so parts are compared only with parts of a similar size:
  // below 256 KiB (time to first byte dominates), below 2 MiB, up to 8 MiB, and larger.
  static size_t SizeClass(uint64_t length) {
    if (length < (256 << 10)) return 0;
    if (length < (2 << 20)) return 1;
    if (length <= (8 << 20)) return 2;
    return 3;
  }
  LatencyTracker& TrackerFor(const ByteRange& range) { return *trackers_[SizeClass(range.length)]; }
  std::array<std::unique_ptr<LatencyTracker>, 4> trackers_;

 private:
  void Pump(const std::shared_ptr<ReadCall>& call);
  void IssueAttempt(const std::shared_ptr<ReadCall>& call, size_t part, bool hedge);
  // Counts the attempt as outstanding and returns its request and callback (and when it started).
  std::pair<ReadRequest, ReadCallback> PrepareAttempt(const std::shared_ptr<ReadCall>& call,
                                                      size_t part, absl::Time* started);
  // After a first attempt was issued: arms its hedge timer, unless it was answered meanwhile (a
  // hit in a cache answers inside the call: no timer, no wake-up of the timer thread).
  void ArmHedge(const std::shared_ptr<ReadCall>& call, size_t part, absl::Time started);
  void OnAttemptDone(const std::shared_ptr<ReadCall>& call, size_t part, absl::Time started,
                     absl::StatusOr<Buffer> result);
  void Finish(const std::shared_ptr<ReadCall>& call);
  void Fail(const std::shared_ptr<ReadCall>& call, absl::Status status);
  void ScheduleHedge(const std::shared_ptr<ReadCall>& call, size_t part, absl::Time due);
  void TimerLoop();

  absl::Mutex mu_;
  absl::CondVar cv_;    // the hedge timer's: a new earliest hedge, or stopping
  absl::CondVar idle_;  // the destructor's: outstanding_ reached zero
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // store requests not yet answered
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Hedge timers: when to re-issue which part. Weak, so a finished call is not kept alive.
  std::multimap<absl::Time, std::pair<std::weak_ptr<ReadCall>, size_t>> hedges_
      ABSL_GUARDED_BY(mu_);
  std::thread timer_ ABSL_GUARDED_BY(mu_);  // started with the first hedge timer
};

void RangedReader::Impl::Start(std::shared_ptr<ReadCall> call) {
  call->plan = CoalesceRanges(call->ranges, options_.max_hole, options_.max_coalesced);
  {
    absl::MutexLock lock(&call->mu);
    for (size_t f = 0; f < call->plan.fetches.size(); ++f) {
      const ByteRange& fetch = call->plan.fetches[f];
      std::vector<ByteRange> split = fetch.length == ByteRange::kToEnd
                                         ? std::vector<ByteRange>{fetch}
                                         : SplitRange(fetch, options_.part_size);
      for (const ByteRange& r : split) call->parts.push_back({.range = r, .fetch = f});
    }
    call->parts_left = call->parts.size();
  }
  Pump(call);
}

// Issues parts while the call has room. Only one thread pumps a call at a time; a store that
// answers on the caller's thread re-enters here, finds `pumping` set and returns, and the loop
// below picks up the room it made (so the stack does not grow with the number of parts).
void RangedReader::Impl::Pump(const std::shared_ptr<ReadCall>& call) {
  {
    absl::MutexLock lock(&call->mu);
    if (call->pumping) return;
    call->pumping = true;
  }
  std::vector<size_t> to_issue;
  while (true) {
    to_issue.clear();
    {
      absl::MutexLock lock(&call->mu);
      while (!call->finished && call->in_flight < options_.max_parts_in_flight &&
             call->next_part < call->parts.size()) {
        size_t p = call->next_part++;
        call->parts[p].attempts_pending = 1;
        ++call->in_flight;
        to_issue.push_back(p);
      }
      if (to_issue.empty()) {
        call->pumping = false;
        return;
      }
    }
    if (to_issue.size() == 1) {
      IssueAttempt(call, to_issue[0], /*hedge=*/false);
      continue;
    }
    // Several parts at once: one batch, so a store that can submit them together does.
    std::vector<ReadRequest> requests;
    std::vector<ReadCallback> callbacks;
    requests.reserve(to_issue.size());
    callbacks.reserve(to_issue.size());
    absl::Time started;
    for (size_t p : to_issue) {
      auto [request, callback] = PrepareAttempt(call, p, &started);
      requests.push_back(std::move(request));
      callbacks.push_back(std::move(callback));
    }
    {
      IssuingScope issuing(call.get());
      store_->ReadBatchAsync(std::move(requests), std::move(callbacks));
    }
    for (size_t p : to_issue) ArmHedge(call, p, started);
  }
}

void RangedReader::Impl::IssueAttempt(const std::shared_ptr<ReadCall>& call, size_t part,
                                      bool hedge) {
  absl::Time started;
  auto [request, callback] = PrepareAttempt(call, part, &started);
  {
    IssuingScope issuing(call.get());
    store_->ReadAsync(std::move(request), std::move(callback));
  }
  if (!hedge) ArmHedge(call, part, started);
}

void RangedReader::Impl::ArmHedge(const std::shared_ptr<ReadCall>& call, size_t part,
                                  absl::Time started) {
  if (!options_.hedge) return;
  ByteRange range;
  {
    absl::MutexLock lock(&call->mu);
    // (A finished call's parts may be gone.)
    if (call->finished || call->parts[part].done) return;
    range = call->parts[part].range;
  }
  absl::Duration delay = TrackerFor(range).HedgeDelay();
  if (delay != absl::InfiniteDuration()) ScheduleHedge(call, part, started + delay);
}

std::pair<ReadRequest, ReadCallback> RangedReader::Impl::PrepareAttempt(
    const std::shared_ptr<ReadCall>& call, size_t part, absl::Time* started_at) {
  ByteRange range;
  {
    absl::MutexLock lock(&call->mu);
    range = call->parts[part].range;
  }
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
  }
  const absl::Time started = absl::Now();
  *started_at = started;
  ReadCallback callback = [this, call, part, started](absl::StatusOr<Buffer> result) {
    OnAttemptDone(call, part, started, std::move(result));
    // Last: the destructor may proceed once this reaches zero.
    absl::MutexLock lock(&mu_);
    // (Not the timer's condition variable: an answer must not wake the timer thread.)
    if (--outstanding_ == 0 && stopping_) idle_.SignalAll();
  };
  return {ReadRequest{call->key, range, call->if_match}, std::move(callback)};
}

void RangedReader::Impl::OnAttemptDone(const std::shared_ptr<ReadCall>& call, size_t part,
                                       absl::Time started, absl::StatusOr<Buffer> result) {
  bool all_done = false;
  ByteRange range;
  {
    absl::MutexLock lock(&call->mu);
    // A part of a call that already failed or finished (its parts may be gone).
    if (call->finished) return;
    ReadCall::Part& p = call->parts[part];
    range = p.range;
    --p.attempts_pending;
    if (p.done) return;  // the loser of a hedge race
    if (!result.ok()) {
      // When the other attempt of a hedged part is still out, let it decide.
      if (p.attempts_pending > 0) return;
      bool later_part_of_fetch = part > 0 && call->parts[part - 1].fetch == p.fetch;
      if (result.status().code() == absl::StatusCode::kOutOfRange && later_part_of_fetch) {
        // The object ends before this part; the earlier parts of the fetch hold its end.
        result = Buffer();
      } else {
        call->finished = true;
      }
    }
    if (!call->finished) {
      if (p.range.length != ByteRange::kToEnd && result->size() > p.range.length) {
        call->finished = true;
        result = absl::DataLossError(StrCat("reading ", RangeText(p.range), " of ", call->url,
                                            ": the store returned ", result->size(),
                                            " bytes, more than asked"));
      } else {
        p.data = *std::move(result);
        p.done = true;
        --call->in_flight;
        all_done = --call->parts_left == 0;
      }
    }
  }
  if (!result.ok()) {
    std::move(call->done)(
        Annotate(result.status(), StrCat("reading ", RangeText(range), " of ", call->url)));
    return;
  }
  if (tls_issuing != call.get()) TrackerFor(range).Record(absl::Now() - started);
  if (all_done) {
    Finish(call);
  } else {
    Pump(call);
  }
}

// Every part is in: check the lengths, assemble fetches and slice out the requested ranges.
void RangedReader::Impl::Finish(const std::shared_ptr<ReadCall>& call) {
  std::vector<Buffer> fetched(call->plan.fetches.size());
  uint64_t object_end = call->known_size;  // where the object ends, when known
  std::string end_evidence;
  absl::Status error;
  {
    absl::MutexLock lock(&call->mu);
    call->finished = true;
    std::vector<std::vector<Buffer>> pieces(fetched.size());
    for (const ReadCall::Part& p : call->parts) {
      pieces[p.fetch].push_back(p.data);
      bool short_part = p.range.length == ByteRange::kToEnd || p.data.size() < p.range.length;
      uint64_t end = p.range.offset + p.data.size();
      if (short_part && end < object_end) {
        object_end = end;
        end_evidence = StrCat(RangeText(p.range), " returned ", p.data.size(), " bytes");
      }
    }
    // No part may hold bytes past the end another part (or Stat) showed.
    for (const ReadCall::Part& p : call->parts) {
      uint64_t end = p.range.offset + p.data.size();
      bool short_part = p.range.length != ByteRange::kToEnd && p.data.size() < p.range.length;
      if ((p.data.size() > 0 && end > object_end) ||
          (short_part && call->known_size != ReadCall::kUnknownSize && end < call->known_size)) {
        std::string why = call->known_size != ReadCall::kUnknownSize
                              ? StrCat("the object has ", call->known_size, " bytes")
                              : StrCat("but ", end_evidence);
        error = absl::DataLossError(StrCat(
            "reading ", call->url, ": ", RangeText(p.range), " returned ", p.data.size(),
            " bytes, ", why, "; the object changed during the read or a response was truncated"));
        break;
      }
    }
    if (error.ok()) {
      for (size_t f = 0; f < fetched.size(); ++f) fetched[f] = Buffer::Concat(pieces[f]);
    }
    call->parts.clear();  // drop the part buffers early; `fetched` holds them
  }
  if (!error.ok()) {
    std::move(call->done)(error);
    return;
  }
  std::vector<Buffer> out(call->ranges.size());
  for (size_t i = 0; i < call->ranges.size(); ++i) {
    const ByteRange& r = call->ranges[i];
    const CoalescedPlan::Source& src = call->plan.sources[i];
    ByteRange effective = r;
    if (object_end != ReadCall::kUnknownSize) {
      auto clamped = ClampRange(r, object_end, call->url);
      if (!clamped.ok()) {
        std::move(call->done)(clamped.status());
        return;
      }
      effective = *clamped;
    }
    out[i] = fetched[src.fetch].Slice(src.offset_in_fetch, effective.length);
  }
  std::move(call->done)(std::move(out));
}

void RangedReader::Impl::ScheduleHedge(const std::shared_ptr<ReadCall>& call, size_t part,
                                       absl::Time due) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  auto it = hedges_.emplace(due, std::make_pair(std::weak_ptr<ReadCall>(call), part));
  if (!timer_.joinable()) timer_ = StartThread("read-hedge", [this] { TimerLoop(); });
  // The timer sleeps until the earliest due time: wake it only when that moved earlier.
  if (it == hedges_.begin()) cv_.SignalAll();
}

void RangedReader::Impl::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (hedges_.empty()) {
      cv_.Wait(&mu_);
      continue;
    }
    auto first = hedges_.begin();
    if (first->first > absl::Now()) {
      cv_.WaitWithDeadline(&mu_, first->first);
      continue;
    }
    std::shared_ptr<ReadCall> call = first->second.first.lock();
    size_t part = first->second.second;
    hedges_.erase(first);
    if (call == nullptr) continue;
    mu_.Unlock();
    bool hedge = false;
    {
      absl::MutexLock call_lock(&call->mu);
      if (!call->finished && !call->parts[part].done && !call->parts[part].hedged) {
        call->parts[part].hedged = true;
        ++call->parts[part].attempts_pending;
        hedge = true;
      }
    }
    if (hedge) IssueAttempt(call, part, /*hedge=*/true);
    mu_.Lock();
  }
}

RangedReader::RangedReader(std::shared_ptr<ObjectStore> store, ReaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(store), options)) {}

RangedReader::~RangedReader() = default;

ObjectStore& RangedReader::store() { return *impl_->store_; }
const ReaderOptions& RangedReader::options() const { return impl_->options_; }

void RangedReader::ReadRangesAsync(std::string key, std::vector<ByteRange> ranges,
                                   std::string if_match, DoneFn done) {
  if (ranges.empty()) {
    std::move(done)(std::vector<Buffer>{});
    return;
  }
  auto call = std::make_shared<ReadCall>();
  call->url = impl_->store_->Url(key);
  call->key = std::move(key);
  call->if_match = std::move(if_match);
  call->ranges = std::move(ranges);
  call->done = std::move(done);
  impl_->Start(std::move(call));
}

absl::StatusOr<std::vector<Buffer>> RangedReader::ReadRanges(std::string_view key,
                                                             std::vector<ByteRange> ranges,
                                                             std::string_view if_match) {
  return Await<absl::StatusOr<std::vector<Buffer>>>([&](auto done) {
    ReadRangesAsync(std::string(key), std::move(ranges), std::string(if_match), std::move(done));
  });
}

absl::StatusOr<Buffer> RangedReader::Read(std::string_view key, ByteRange range) {
  if (range.length != ByteRange::kToEnd && range.length <= impl_->options_.part_size) {
    ASSIGN_OR_RETURN(auto buffers, ReadRanges(key, {range}));
    return std::move(buffers[0]);
  }
  // Several parts: learn the size (for kToEnd and the length check) and pin the version.
  ASSIGN_OR_RETURN(ObjectInfo info, impl_->store_->Stat(key));
  ASSIGN_OR_RETURN(ByteRange clamped, ClampRange(range, info.size, impl_->store_->Url(key)));
  auto call = std::make_shared<ReadCall>();
  call->url = impl_->store_->Url(key);
  call->key = std::string(key);
  call->if_match = info.etag;
  call->ranges = {clamped};
  call->known_size = info.size;
  ASSIGN_OR_RETURN(auto buffers, Await<absl::StatusOr<std::vector<Buffer>>>([&](auto done) {
                     call->done = std::move(done);
                     impl_->Start(std::move(call));
                   }));
  return std::move(buffers[0]);
}

}  // namespace stoker::io
