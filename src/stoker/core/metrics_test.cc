#include "stoker/core/metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace stoker {
namespace {

TEST(Metrics, RendersCountersGaugesAndLabelsSorted) {
  MetricsRegistry r;
  r.GetCounter("stoker_b_total", "B things", {{"job", "7"}}).Increment(3);
  r.GetCounter("stoker_b_total", "ignored", {{"job", "7"}}).Increment(0.5);  // same series
  r.GetCounter("stoker_b_total", "", {{"job", "8"}}).Increment();
  r.GetGauge("stoker_a_bytes", "A bytes\nnow").Set(-2);
  EXPECT_EQ(r.Render(),
            "# HELP stoker_a_bytes A bytes\\nnow\n"
            "# TYPE stoker_a_bytes gauge\n"
            "stoker_a_bytes -2\n"
            "# HELP stoker_b_total B things\n"
            "# TYPE stoker_b_total counter\n"
            "stoker_b_total{job=\"7\"} 3.5\n"
            "stoker_b_total{job=\"8\"} 1\n");
}

TEST(Metrics, EscapesLabelValues) {
  EXPECT_EQ(RenderLabels({{"path", "a\"b\\c\nd"}, {"x", ""}}), "{path=\"a\\\"b\\\\c\\nd\",x=\"\"}");
  EXPECT_EQ(RenderLabels({}), "");
}

TEST(Metrics, HistogramBucketsAreCumulativeAndInclusive) {
  MetricsRegistry r;
  Histogram& h = r.GetHistogram("stoker_x_seconds", "X", {0.1, 1}, {{"op", "get"}});
  h.Observe(0.1);  // le is inclusive
  h.Observe(0.5);
  h.Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP stoker_x_seconds X\n"
            "# TYPE stoker_x_seconds histogram\n"
            "stoker_x_seconds_bucket{op=\"get\",le=\"0.1\"} 1\n"
            "stoker_x_seconds_bucket{op=\"get\",le=\"1\"} 2\n"
            "stoker_x_seconds_bucket{op=\"get\",le=\"+Inf\"} 3\n"
            "stoker_x_seconds_sum{op=\"get\"} 7.6\n"
            "stoker_x_seconds_count{op=\"get\"} 3\n");
}

TEST(Metrics, CollectorsMergeWithSeriesAndVanishWhenRemoved) {
  MetricsRegistry r;
  r.GetGauge("stoker_workers", "Workers", {{"state", "healthy"}}).Set(1);
  int64_t id = r.AddCollector([](MetricsWriter& w) {
    w.Write("stoker_workers", "Workers", MetricsWriter::Type::kGauge, {{"state", "lost"}}, 2);
    w.Write("stoker_c_total", "C", MetricsWriter::Type::kCounter, {}, 5);
  });
  std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE stoker_workers gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_workers{state=\"healthy\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_workers{state=\"lost\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE stoker_c_total counter\nstoker_c_total 5\n"), std::string::npos);
  r.RemoveCollector(id);
  EXPECT_EQ(r.Render().find("stoker_c_total"), std::string::npos);
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry r;
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&r] {
      for (int i = 0; i < 10000; ++i) {
        r.GetCounter("stoker_n_total", "N").Increment();
        r.GetHistogram("stoker_h_seconds", "H", LatencyBucketsSeconds()).Observe(0.002);
        (void)r.Render().size();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(r.GetCounter("stoker_n_total", "N").value(), 40000);
  EXPECT_EQ(r.GetHistogram("stoker_h_seconds", "H", LatencyBucketsSeconds()).count(), 40000u);
}

TEST(Metrics, FormatsValues) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(1e12), "1000000000000");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
}

}  // namespace
}  // namespace stoker
