// ParamReader: validates one JSON object of a pipeline spec (an op, the source, the top level) and
// reads typed values from it. Errors name the JSON path ("$.ops[3].size"), the expected type and
// the allowed values. It keeps the first error (later reads return defaults), so a parser reads
// everything and checks `Finish()` once. Finish() also rejects fields nobody read.
//
// Thread safety: not thread-safe; one reader per object being parsed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace stoker::data {

class ParamReader {
 public:
  // `object` must outlive the reader. `path` is its JSON path, e.g. "$.ops[3]"; `what` names it in
  // messages, e.g. "op 'resize'".
  ParamReader(const nlohmann::json& object, std::string path, std::string what);

  bool Has(const std::string& key) const;
  // Required when `def` is nullopt. `allowed` (if not empty) lists the accepted values.
  std::string String(const std::string& key, std::optional<std::string> def = std::nullopt,
                     const std::vector<std::string>& allowed = {});
  int64_t Int(const std::string& key, std::optional<int64_t> def = std::nullopt,
              int64_t min = INT64_MIN, int64_t max = INT64_MAX);
  double Number(const std::string& key, std::optional<double> def = std::nullopt,
                double min = -1e300, double max = 1e300);
  bool Bool(const std::string& key, std::optional<bool> def = std::nullopt);
  // An array of numbers with min_len..max_len entries, each in [min, max].
  std::vector<double> NumberList(const std::string& key, std::optional<std::vector<double>> def,
                                 size_t min_len, size_t max_len, double min = -1e300,
                                 double max = 1e300);
  std::vector<int64_t> IntList(const std::string& key, std::optional<std::vector<int64_t>> def,
                               size_t min_len, size_t max_len, int64_t min = INT64_MIN);
  std::vector<std::string> StringList(const std::string& key,
                                      std::optional<std::vector<std::string>> def);
  // [height, width] from either an integer N (square) or an array [h, w]; each >= 1.
  std::pair<int, int> Size(const std::string& key);
  // The raw value (marked as known), or nullptr if absent.
  const nlohmann::json* Raw(const std::string& key);

  // Records an error about `key` (for checks across fields).
  void Fail(const std::string& key, const std::string& message);
  // The first error, or an error naming the first unknown field and the allowed ones.
  absl::Status Finish();
  const std::string& path() const { return path_; }
  std::string PathOf(const std::string& key) const { return path_ + "." + key; }

 private:
  const nlohmann::json* Lookup(const std::string& key, const std::string& expected, bool required);
  void TypeError(const std::string& key, const std::string& expected, const nlohmann::json& got);

  const nlohmann::json& object_;
  std::string path_;
  std::string what_;
  std::set<std::string> known_;
  absl::Status status_;
};

// "$.ops[3]" style helper.
inline std::string IndexPath(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

}  // namespace stoker::data
