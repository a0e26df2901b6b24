// LatencyStore: a test double that wraps any ObjectStore and delays every ReadAsync on its own
// timer thread, like a network store with a time to first byte and a per-connection bandwidth
// (delay = latency + uniform jitter + bytes / bytes_per_second; requests do not slow each other).
// The base store is read when the request arrives; the answer is delivered when it is due. It can
// also inject faults into reads: fail the next N, stall the next N until released, or shorten the
// next N bodies. It counts reads so tests can assert how many requests reached the store. Stat,
// List, writes and Delete pass straight through (counted too).
//
// Thread safety: every method is thread-safe. Callbacks run on the timer thread (never on the
// caller's), one at a time, in due-time order. The destructor delivers every pending and stalled
// read at once (so readers waiting on them finish), waits for the answers the base store still
// owes, then joins the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/core/thread.h"
#include "stoker/io/object_store.h"

namespace stoker::testing {

class LatencyStore : public io::ObjectStore {
 public:
  struct Options {
    absl::Duration latency = absl::Milliseconds(1);  // fixed delay of every read
    absl::Duration jitter = absl::ZeroDuration();    // plus uniform [0, jitter)
    double bytes_per_second = 0;  // plus size / bytes_per_second (per request); 0: no limit
    uint32_t seed = 1;
  };

  explicit LatencyStore(std::shared_ptr<io::ObjectStore> base) : LatencyStore(base, Options{}) {}
  LatencyStore(std::shared_ptr<io::ObjectStore> base, Options options)
      : base_(std::move(base)), options_(options), rng_(options.seed) {
    thread_ = StartThread("latency-store", [this] { Loop(); });
  }

  ~LatencyStore() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      cv_.SignalAll();
    }
    thread_.join();
  }

  // --- fault injection (each applies to the next reads, in order of arrival) ---
  // The next `n` reads fail with `status` (after the usual latency).
  void FailNext(int n, absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_next_ = n;
    fail_status_ = std::move(status);
  }
  // The next `n` reads are held (not answered) until ReleaseStalled() or destruction.
  void StallNext(int n) {
    absl::MutexLock lock(&mu_);
    stall_next_ = n;
  }
  // Answers every stalled read now.
  void ReleaseStalled() {
    absl::MutexLock lock(&mu_);
    for (auto& pending : stalled_) queue_.emplace(absl::InfinitePast(), std::move(pending));
    stalled_.clear();
    cv_.SignalAll();
  }
  // The next `n` reads return `drop` bytes fewer than the store gave (a truncated body).
  void ShortenNext(int n, uint64_t drop) {
    absl::MutexLock lock(&mu_);
    shorten_next_ = n;
    shorten_by_ = drop;
  }
  void SetLatency(absl::Duration latency) {
    absl::MutexLock lock(&mu_);
    options_.latency = latency;
  }

  // --- observations ---
  int64_t reads() const { return reads_.load(); }  // ReadAsync calls so far
  int64_t stats() const { return stats_.load(); }  // Stat calls so far
  int64_t max_reads_in_flight() const { return max_in_flight_.load(); }
  int stalled() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(stalled_.size());
  }
  std::vector<io::ReadRequest> requests() const {  // every ReadAsync request so far
    absl::MutexLock lock(&mu_);
    return log_;
  }
  // Blocks until `n` reads are stalled or `timeout` passes; returns whether they are.
  bool AwaitStalled(int n, absl::Duration timeout) const {
    absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (static_cast<int>(stalled_.size()) < n) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) break;
    }
    return static_cast<int>(stalled_.size()) >= n;
  }

  // --- ObjectStore ---
  std::string Url(std::string_view key) const override { return base_->Url(key); }
  void StatAsync(std::string key, io::StatCallback done) override {
    stats_.fetch_add(1);
    base_->StatAsync(std::move(key), std::move(done));
  }
  absl::StatusOr<io::ListResult> List(const io::ListOptions& options) override {
    return base_->List(options);
  }
  absl::StatusOr<std::unique_ptr<io::ObjectWriter>> OpenWriter(std::string_view key) override {
    return base_->OpenWriter(key);
  }
  absl::Status Delete(std::string_view key) override { return base_->Delete(key); }

  void ReadAsync(io::ReadRequest request, io::ReadCallback done) override {
    reads_.fetch_add(1);
    int64_t now_in_flight = in_flight_.fetch_add(1) + 1;
    int64_t seen = max_in_flight_.load();
    while (now_in_flight > seen && !max_in_flight_.compare_exchange_weak(seen, now_in_flight)) {
    }
    absl::Time arrived = absl::Now();
    absl::Status fail;
    uint64_t shorten_by = 0;
    bool stall = false;
    {
      absl::MutexLock lock(&mu_);
      log_.push_back(request);
      if (fail_next_ > 0) {
        --fail_next_;
        fail = fail_status_;
      }
      if (shorten_next_ > 0) {
        --shorten_next_;
        shorten_by = shorten_by_;
      }
      if (stall_next_ > 0) {
        --stall_next_;
        stall = true;
      }
    }
    auto enqueue = [this, arrived, stall,
                    done = std::move(done)](absl::StatusOr<Buffer> result) mutable {
      absl::MutexLock lock(&mu_);
      Pending pending{std::move(result), std::move(done)};
      if (stall) {
        stalled_.push_back(std::move(pending));
      } else {
        absl::Duration delay = options_.latency;
        if (options_.jitter > absl::ZeroDuration()) {
          delay += options_.jitter * std::uniform_real_distribution<double>(0, 1)(rng_);
        }
        if (options_.bytes_per_second > 0 && pending.result.ok()) {
          delay += absl::Seconds(static_cast<double>(pending.result->size()) /
                                 options_.bytes_per_second);
        }
        queue_.emplace(arrived + delay, std::move(pending));
      }
      cv_.SignalAll();
    };
    if (!fail.ok()) {
      enqueue(std::move(fail));
      return;
    }
    base_->ReadAsync(std::move(request), [shorten_by, enqueue = std::move(enqueue)](
                                             absl::StatusOr<Buffer> result) mutable {
      if (result.ok() && shorten_by > 0) {
        size_t keep = result->size() > shorten_by ? result->size() - shorten_by : 0;
        result = result->Slice(0, keep);
      }
      enqueue(std::move(result));
    });
  }

 private:
  struct Pending {
    absl::StatusOr<Buffer> result;
    io::ReadCallback done;
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (stopping_) {
        // Deliver everything left at once so nobody waits forever.
        for (auto& pending : stalled_) queue_.emplace(absl::InfinitePast(), std::move(pending));
        stalled_.clear();
        // Also wait for answers the base store still owes (an asynchronous base).
        if (queue_.empty() && in_flight_.load() == 0) return;
      }
      if (queue_.empty()) {
        cv_.Wait(&mu_);
        continue;
      }
      auto first = queue_.begin();
      if (!stopping_ && first->first > absl::Now()) {
        // Woken early when an earlier read arrives or we stop.
        cv_.WaitWithDeadline(&mu_, first->first);
        continue;
      }
      Pending pending = std::move(first->second);
      queue_.erase(first);
      mu_.Unlock();
      Deliver(std::move(pending));
      mu_.Lock();
    }
  }

  void Deliver(Pending pending) {
    in_flight_.fetch_sub(1);
    std::move(pending.done)(std::move(pending.result));
  }

  const std::shared_ptr<io::ObjectStore> base_;
  mutable absl::Mutex mu_;
  Options options_ ABSL_GUARDED_BY(mu_);
  std::mt19937 rng_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, Pending> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> stalled_ ABSL_GUARDED_BY(mu_);
  std::vector<io::ReadRequest> log_ ABSL_GUARDED_BY(mu_);
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
  int stall_next_ ABSL_GUARDED_BY(mu_) = 0;
  int shorten_next_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t shorten_by_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::CondVar cv_;  // signalled on every change of queue_, stalled_ or stopping_
  std::atomic<int64_t> reads_{0};
  std::atomic<int64_t> stats_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> max_in_flight_{0};
  std::thread thread_;
};

}  // namespace stoker::testing
