// Process metrics in the Prometheus text exposition format (version 0.0.4), served at /metrics by
// the service's processes (docs/operations.md lists every metric).
//
//   Counter& sent = MetricsRegistry::Default().GetCounter(
//       "stoker_worker_sent_bytes_total", "Payload bytes sent to consumers", {{"job", "7"}});
//   sent.Increment(n);
//
// A metric is one series: a family name plus label values. Get* returns the same object for the
// same name and labels (registering it the first time); the object lives as long as the registry,
// so callers keep the reference. Values that live elsewhere (a count of workers in the
// dispatcher's state, a cache's statistics) are reported by a collector, a callback run at each
// Render that writes samples of its own: its series vanish when the collector is removed.
//
// Names follow Prometheus conventions: a `stoker_` prefix, base units (seconds, bytes), `_total`
// for counters. Histograms have fixed upper bounds, rendered as cumulative `_bucket{le=...}`
// samples plus `_sum` and `_count`.
//
// Thread safety: everything is thread-safe. Counter, Gauge and Histogram updates are lock-free
// atomics. Get* take the registry's mutex for a map lookup: keep the reference on hot paths.
// Collectors run under a second mutex (never while the first is held), so a collector may take
// its owner's lock even where that owner calls Get* under the same lock; a collector must not add
// or remove collectors.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace stoker {

// Label names and values of one series, in the order given.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up (reset only by a restart of the process).
class Counter {
 public:
  void Increment(double delta = 1) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts observations into buckets by upper bound (le), with their sum.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void Observe(double v);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Cumulative counts per bound (bounds_.size() + 1 entries, the last one +Inf = count).
  std::vector<uint64_t> CumulativeCounts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound + one for +Inf, not cumulative
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Latency bounds in seconds for requests and RPCs: 1 ms .. 30 s.
const std::vector<double>& LatencyBucketsSeconds();

// What a collector writes: samples of counter or gauge families, merged by name with the
// registry's own series at Render.
class MetricsWriter {
 public:
  enum class Type { kCounter, kGauge };
  virtual ~MetricsWriter() = default;
  virtual void Write(std::string_view name, std::string_view help, Type type,
                     const MetricLabels& labels, double value) = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The process-wide registry (never destroyed) that /metrics renders.
  static MetricsRegistry& Default();

  // The series `name`{labels}; registered at the first call. The family's help text is the one
  // given first. Asking for a name registered with another type is a programming error: the
  // process aborts naming it.
  Counter& GetCounter(std::string_view name, std::string_view help,
                      const MetricLabels& labels = {});
  Gauge& GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help,
                          const std::vector<double>& upper_bounds, const MetricLabels& labels = {});

  // Adds a collector; returns an id for RemoveCollector. Removing waits for a Render in progress.
  using Collector = std::function<void(MetricsWriter&)>;
  int64_t AddCollector(Collector collector);
  void RemoveCollector(int64_t id);

  // Every family, sorted by name, in the text exposition format.
  std::string Render() const;

  // The rendered content type for an HTTP reply.
  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    std::string help;
    Type type;
    // Series by rendered label set ({a="b",...} or "").
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family& FamilyFor(std::string_view name, std::string_view help, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex collectors_mu_;  // never taken while mu_ is held
  std::map<int64_t, Collector> collectors_ ABSL_GUARDED_BY(collectors_mu_);
  int64_t next_collector_ ABSL_GUARDED_BY(collectors_mu_) = 1;
};

// Renders labels as {name="value",...} with the format's escapes ("" when empty).
std::string RenderLabels(const MetricLabels& labels);
// A sample value as the format writes it (integers without a fraction, +Inf, NaN).
std::string FormatMetricValue(double v);

}  // namespace stoker
