#include "stoker/core/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "stoker/core/strings.h"

namespace stoker {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void Histogram::Observe(double v) {
  size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                 bounds_.begin());  // first bound >= v: le is inclusive
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

const std::vector<double>& LatencyBucketsSeconds() {
  static const std::vector<double> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25,  0.5,    1,     2.5,  5,     10,   30};
  return kBounds;
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  std::string shortest = absl::StrFormat("%.15g", v);  // exact unless it does not read back
  return std::strtod(shortest.c_str(), nullptr) == v ? shortest : absl::StrFormat("%.17g", v);
}

namespace {

void AppendEscaped(std::string* out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && quote) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

// {a="b"} + le -> {a="b",le="0.5"}
std::string WithLabel(const std::string& labels, std::string_view name, std::string_view value) {
  std::string extra = StrCat(name, "=\"", value, "\"");
  if (labels.empty()) return StrCat("{", extra, "}");
  return StrCat(labels.substr(0, labels.size() - 1), ",", extra, "}");
}

const char* TypeName(int type) {
  switch (type) {
    case 0:
      return "counter";
    case 1:
      return "gauge";
    default:
      return "histogram";
  }
}

// Families being rendered: lines by family name.
struct Rendered {
  std::string help;
  int type = 0;
  std::vector<std::string> lines;
};

class CollectingWriter : public MetricsWriter {
 public:
  explicit CollectingWriter(std::map<std::string, Rendered, std::less<>>* out) : out_(out) {}
  void Write(std::string_view name, std::string_view help, Type type, const MetricLabels& labels,
             double value) override {
    auto it = out_->find(name);
    if (it == out_->end()) {
      it = out_->emplace(std::string(name), Rendered{std::string(help), static_cast<int>(type), {}})
               .first;
    }
    it->second.lines.push_back(StrCat(name, RenderLabels(labels), " ", FormatMetricValue(value)));
  }

 private:
  std::map<std::string, Rendered, std::less<>>* out_;
};

}  // namespace

std::string RenderLabels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append(labels[i].first);
    out.append("=\"");
    AppendEscaped(&out, labels[i].second, /*quote=*/true);
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

MetricsRegistry& MetricsRegistry::Default() {
  static auto* registry = new MetricsRegistry();
  return *registry;
}

MetricsRegistry::Family& MetricsRegistry::FamilyFor(std::string_view name, std::string_view help,
                                                    Type type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{std::string(help), type, {}, {}, {}}).first;
  }
  if (it->second.type != type) {
    std::fprintf(stderr, "metric %s registered with two types\n", std::string(name).c_str());
    std::abort();
  }
  return it->second;
}

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                     const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kCounter).counters[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                 const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kGauge).gauges[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         const std::vector<double>& upper_bounds,
                                         const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kHistogram).histograms[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Histogram>(upper_bounds);
  return *slot;
}

int64_t MetricsRegistry::AddCollector(Collector collector) {
  absl::MutexLock lock(&collectors_mu_);
  int64_t id = next_collector_++;
  collectors_.emplace(id, std::move(collector));
  return id;
}

void MetricsRegistry::RemoveCollector(int64_t id) {
  absl::MutexLock lock(&collectors_mu_);
  collectors_.erase(id);
}

std::string MetricsRegistry::Render() const {
  std::map<std::string, Rendered, std::less<>> out;
  {
    absl::MutexLock lock(&collectors_mu_);
    CollectingWriter writer(&out);
    for (const auto& [id, collector] : collectors_) collector(writer);
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [name, f] : families_) {
    Rendered& r = out[name];
    if (r.lines.empty()) {  // a collector may have written the family first
      r.help = f.help;
      r.type = static_cast<int>(f.type);
    }
    for (const auto& [labels, c] : f.counters) {
      r.lines.push_back(StrCat(name, labels, " ", FormatMetricValue(c->value())));
    }
    for (const auto& [labels, g] : f.gauges) {
      r.lines.push_back(StrCat(name, labels, " ", FormatMetricValue(g->value())));
    }
    for (const auto& [labels, h] : f.histograms) {
      // _count is the +Inf bucket, so the two always agree even while observations arrive.
      std::vector<uint64_t> cumulative = h->CumulativeCounts();
      const auto& bounds = h->upper_bounds();
      for (size_t i = 0; i < bounds.size(); ++i) {
        r.lines.push_back(StrCat(name, "_bucket",
                                 WithLabel(labels, "le", FormatMetricValue(bounds[i])), " ",
                                 cumulative[i]));
      }
      r.lines.push_back(
          StrCat(name, "_bucket", WithLabel(labels, "le", "+Inf"), " ", cumulative.back()));
      r.lines.push_back(StrCat(name, "_sum", labels, " ", FormatMetricValue(h->sum())));
      r.lines.push_back(StrCat(name, "_count", labels, " ", cumulative.back()));
    }
  }
  std::string text;
  for (const auto& [name, r] : out) {
    if (r.lines.empty()) continue;
    text.append(StrCat("# HELP ", name, " "));
    AppendEscaped(&text, r.help, /*quote=*/false);
    text.append(StrCat("\n# TYPE ", name, " ", TypeName(r.type), "\n"));
    for (const std::string& line : r.lines) text.append(line).push_back('\n');
  }
  return text;
}

}  // namespace stoker
