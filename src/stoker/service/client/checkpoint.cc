#include "stoker/service/client/checkpoint.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::service {
namespace {
using json = nlohmann::json;
constexpr std::string_view kFormat = "stoker-service-checkpoint";
constexpr int64_t kMaxPosition = int64_t{1} << 62;
constexpr int64_t kMaxSequence = int64_t{1} << 40;
constexpr int64_t kMaxEpoch = 1000000;

absl::Status Bad(std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("checkpoint token: ", where, ": ", what,
             " (a token is written by stoker consume --checkpoint or state_dict(); was the file "
             "edited or cut short?)"));
}

absl::StatusOr<int64_t> Int(const json& j, const char* key, int64_t lo, int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    return Bad(StrCat("$.", key), "missing or not an integer");
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return Bad(StrCat("$.", key), StrCat(v, " is not ", lo, " .. ", hi));
  return v;
}

// Sorted, disjoint ranges within [lo, hi).
absl::StatusOr<std::vector<ServiceCheckpoint::Range>> Ranges(const json& j,
                                                             const std::string& where, int64_t lo,
                                                             int64_t hi) {
  if (!j.is_array()) return Bad(where, "not an array of [first, last) pairs");
  std::vector<ServiceCheckpoint::Range> out;
  int64_t last = lo;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& r = j[i];
    const std::string at = StrCat(where, "[", i, "]");
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer())
      return Bad(at, "not a pair of integers");
    int64_t a = r[0].get<int64_t>(), b = r[1].get<int64_t>();
    if (a < last || b <= a || b > hi)
      return Bad(
          at, StrCat("[", a, ", ", b, ") is not sorted, disjoint and within [", lo, ", ", hi, ")"));
    out.emplace_back(a, b);
    last = b;
  }
  return out;
}
}  // namespace

namespace {
std::string Short(const json& v) {
  std::string s = v.is_null() ? "absent" : v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

std::string FirstDifference(const json& a, const json& b, const std::string& path) {
  if (a == b) return "";
  if (a.is_object() && b.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.push_back(k);
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (const std::string& k : keys) {
      std::string d = FirstDifference(a.value(k, json()), b.value(k, json()), StrCat(path, ".", k));
      if (!d.empty()) return d;
    }
    return "";
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      std::string d = FirstDifference(i < a.size() ? a[i] : json(), i < b.size() ? b[i] : json(),
                                      StrCat(path, "[", i, "]"));
      if (!d.empty()) return d;
    }
    return "";
  }
  return StrCat(path, " is ", Short(a), " in the checkpoint, ", Short(b), " in this spec");
}

json Canonical(json spec) {
  if (spec.is_object()) {
    spec.erase("threads");
    if (spec.contains("source") && spec["source"].is_object()) spec["source"].erase("read_ahead");
  }
  return spec;
}
}  // namespace

std::string DescribeSpecDifference(const json& checkpoint, const json& now) {
  return FirstDifference(Canonical(checkpoint), Canonical(now), "$");
}

std::vector<ServiceCheckpoint::Range> MergeRanges(std::vector<ServiceCheckpoint::Range> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<ServiceCheckpoint::Range> out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

std::string ServiceCheckpoint::ToJson() const {
  json j = {{"format", kFormat},          {"version", 1},
            {"fingerprint", fingerprint}, {"epoch", epoch},
            {"num_samples", num_samples}, {"done", json::array()},
            {"open", json::array()},      {"elements", elements},
            {"samples", samples}};
  if (!spec.is_null()) j["spec"] = spec;
  for (const auto& [a, b] : done) j["done"].push_back({a, b});
  for (const OpenSplit& s : open) {
    json d = json::array();
    for (const auto& [a, b] : s.delivered) d.push_back({a, b});
    j["open"].push_back({{"begin", s.begin}, {"end", s.end}, {"delivered", std::move(d)}});
  }
  return j.dump();
}

std::vector<ServiceCheckpoint::Piece> ServiceCheckpoint::Remaining() const {
  std::vector<Piece> taken;  // done and open, in order
  for (const auto& [a, b] : done) taken.push_back({a, b, false});
  for (const OpenSplit& s : open) taken.push_back({s.begin, s.end, true});
  std::sort(taken.begin(), taken.end(),
            [](const Piece& x, const Piece& y) { return x.begin < y.begin; });
  std::vector<Piece> out;
  int64_t p = 0;
  for (const Piece& t : taken) {
    if (t.begin > p) out.push_back({p, t.begin, false});
    if (t.exact) out.push_back(t);
    p = std::max(p, t.end);
  }
  if (p < num_samples) out.push_back({p, num_samples, false});
  return out;
}

absl::StatusOr<ServiceCheckpoint> ParseServiceCheckpoint(std::string_view token) {
  json j = json::parse(token, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("$", "not a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || *format != kFormat)
    return Bad("$.format", StrCat("is not \"", kFormat, "\""));
  ASSIGN_OR_RETURN(int64_t version, Int(j, "version", 1, 1000));
  if (version != 1)
    return Bad("$.version", StrCat(version, " is newer than this stoker reads (1)"));
  ServiceCheckpoint c;
  auto fp = j.find("fingerprint");
  if (fp == j.end() || !fp->is_string() || fp->get<std::string>().empty())
    return Bad("$.fingerprint", "missing or not a string");
  c.fingerprint = fp->get<std::string>();
  ASSIGN_OR_RETURN(c.epoch, Int(j, "epoch", 0, kMaxEpoch));
  ASSIGN_OR_RETURN(c.num_samples, Int(j, "num_samples", 1, kMaxPosition));
  ASSIGN_OR_RETURN(c.elements, Int(j, "elements", 0, kMaxPosition));
  ASSIGN_OR_RETURN(c.samples, Int(j, "samples", 0, kMaxPosition));
  if (auto spec = j.find("spec"); spec != j.end()) {
    if (!spec->is_object()) return Bad("$.spec", "not a JSON object");
    c.spec = *spec;
  }
  if (!j.contains("done")) return Bad("$.done", "missing");
  ASSIGN_OR_RETURN(c.done, Ranges(j["done"], "$.done", 0, c.num_samples));
  auto open = j.find("open");
  if (open == j.end() || !open->is_array()) return Bad("$.open", "missing or not an array");
  std::vector<ServiceCheckpoint::Range> taken = c.done;
  for (size_t i = 0; i < open->size(); ++i) {
    const json& s = (*open)[i];
    const std::string at = StrCat("$.open[", i, "]");
    if (!s.is_object()) return Bad(at, "not an object");
    ServiceCheckpoint::OpenSplit o;
    ASSIGN_OR_RETURN(o.begin, Int(s, "begin", 0, c.num_samples - 1));
    ASSIGN_OR_RETURN(o.end, Int(s, "end", o.begin + 1, c.num_samples));
    if (!s.contains("delivered")) return Bad(StrCat(at, ".delivered"), "missing");
    ASSIGN_OR_RETURN(o.delivered,
                     Ranges(s["delivered"], StrCat(at, ".delivered"), 0, kMaxSequence));
    taken.emplace_back(o.begin, o.end);
    c.open.push_back(std::move(o));
  }
  std::sort(taken.begin(), taken.end());
  for (size_t i = 1; i < taken.size(); ++i)
    if (taken[i].first < taken[i - 1].second)
      return Bad("$.open", StrCat("positions [", taken[i].first, ", ", taken[i].second,
                                  ") overlap another done or open range"));
  return c;
}

}  // namespace stoker::service
