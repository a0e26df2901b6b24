#include "stoker/data/params.h"

#include <cmath>

#include "stoker/core/strings.h"

namespace stoker::data {
namespace {

std::string Describe(const nlohmann::json& v) {
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return StrCat(v.type_name(), " ", text);
}

std::string JoinQuoted(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) out += StrCat(out.empty() ? "" : ", ", "\"", v, "\"");
  return out;
}

}  // namespace

ParamReader::ParamReader(const nlohmann::json& object, std::string path, std::string what)
    : object_(object), path_(std::move(path)), what_(std::move(what)) {
  if (!object_.is_object()) {
    status_ = absl::InvalidArgumentError(
        StrCat(path_, ": expected an object for ", what_, ", got ", Describe(object_)));
  }
}

bool ParamReader::Has(const std::string& key) const {
  return object_.is_object() && object_.contains(key);
}

const nlohmann::json* ParamReader::Lookup(const std::string& key, const std::string& expected,
                                          bool required) {
  known_.insert(key);
  if (!status_.ok()) return nullptr;
  auto it = object_.find(key);
  if (it == object_.end()) {
    if (required) {
      status_ = absl::InvalidArgumentError(
          StrCat(PathOf(key), ": missing required field of ", what_, "; expected ", expected));
    }
    return nullptr;
  }
  return &*it;
}

void ParamReader::TypeError(const std::string& key, const std::string& expected,
                            const nlohmann::json& got) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(
        StrCat(PathOf(key), ": expected ", expected, ", got ", Describe(got)));
  }
}

void ParamReader::Fail(const std::string& key, const std::string& message) {
  known_.insert(key);
  if (status_.ok()) status_ = absl::InvalidArgumentError(StrCat(PathOf(key), ": ", message));
}

std::string ParamReader::String(const std::string& key, std::optional<std::string> def,
                                const std::vector<std::string>& allowed) {
  std::string expected = allowed.empty() ? "a string" : StrCat("one of ", JoinQuoted(allowed));
  const nlohmann::json* v = Lookup(key, expected, !def.has_value());
  if (v == nullptr) return def.value_or("");
  if (!v->is_string()) {
    TypeError(key, expected, *v);
    return def.value_or("");
  }
  std::string s = v->get<std::string>();
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    TypeError(key, expected, *v);
    return def.value_or("");
  }
  return s;
}

int64_t ParamReader::Int(const std::string& key, std::optional<int64_t> def, int64_t min,
                         int64_t max) {
  std::string expected = "an integer";
  if (min != INT64_MIN && max != INT64_MAX) {
    expected += StrCat(" in [", min, ", ", max, "]");
  } else if (min != INT64_MIN) {
    expected += StrCat(" >= ", min);
  }
  const nlohmann::json* v = Lookup(key, expected, !def.has_value());
  if (v == nullptr) return def.value_or(0);
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX)) {
    TypeError(key, expected, *v);
    return def.value_or(0);
  }
  int64_t x = v->get<int64_t>();
  if (x < min || x > max) {
    TypeError(key, expected, *v);
    return def.value_or(0);
  }
  return x;
}

double ParamReader::Number(const std::string& key, std::optional<double> def, double min,
                           double max) {
  std::string expected = StrCat("a number in [", min, ", ", max, "]");
  if (min <= -1e300) expected = "a number";
  const nlohmann::json* v = Lookup(key, expected, !def.has_value());
  if (v == nullptr) return def.value_or(0);
  if (!v->is_number() || !(v->get<double>() >= min && v->get<double>() <= max)) {
    TypeError(key, expected, *v);
    return def.value_or(0);
  }
  return v->get<double>();
}

bool ParamReader::Bool(const std::string& key, std::optional<bool> def) {
  const nlohmann::json* v = Lookup(key, "true or false", !def.has_value());
  if (v == nullptr) return def.value_or(false);
  if (!v->is_boolean()) {
    TypeError(key, "true or false", *v);
    return def.value_or(false);
  }
  return v->get<bool>();
}

std::vector<double> ParamReader::NumberList(const std::string& key,
                                            std::optional<std::vector<double>> def, size_t min_len,
                                            size_t max_len, double min, double max) {
  std::string expected = min_len == max_len
                             ? StrCat("an array of ", min_len, " numbers")
                             : StrCat("an array of ", min_len, " to ", max_len, " numbers");
  if (min > -1e300) expected += StrCat(" each in [", min, ", ", max, "]");
  const nlohmann::json* v = Lookup(key, expected, !def.has_value());
  if (v == nullptr) return def.value_or(std::vector<double>{});
  std::vector<double> out;
  bool ok = v->is_array() && v->size() >= min_len && v->size() <= max_len;
  if (ok) {
    for (const auto& x : *v) {
      if (!x.is_number() || !(x.get<double>() >= min && x.get<double>() <= max)) {
        ok = false;
        break;
      }
      out.push_back(x.get<double>());
    }
  }
  if (!ok) {
    TypeError(key, expected, *v);
    return def.value_or(std::vector<double>{});
  }
  return out;
}

std::vector<int64_t> ParamReader::IntList(const std::string& key,
                                          std::optional<std::vector<int64_t>> def, size_t min_len,
                                          size_t max_len, int64_t min) {
  std::string expected = min_len == max_len
                             ? StrCat("an array of ", min_len, " integers")
                             : StrCat("an array of ", min_len, " to ", max_len, " integers");
  if (min != INT64_MIN) expected += StrCat(" each >= ", min);
  const nlohmann::json* v = Lookup(key, expected, !def.has_value());
  if (v == nullptr) return def.value_or(std::vector<int64_t>{});
  std::vector<int64_t> out;
  bool ok = v->is_array() && v->size() >= min_len && v->size() <= max_len;
  if (ok) {
    for (const auto& x : *v) {
      if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > INT64_MAX) ||
          x.get<int64_t>() < min) {
        ok = false;
        break;
      }
      out.push_back(x.get<int64_t>());
    }
  }
  if (!ok) {
    TypeError(key, expected, *v);
    return def.value_or(std::vector<int64_t>{});
  }
  return out;
}

std::vector<std::string> ParamReader::StringList(const std::string& key,
                                                 std::optional<std::vector<std::string>> def) {
  const char* expected = "an array of strings";
  const nlohmann::json* v = Lookup(key, expected, !def.has_value());
  if (v == nullptr) return def.value_or(std::vector<std::string>{});
  std::vector<std::string> out;
  bool ok = v->is_array();
  if (ok) {
    for (const auto& x : *v) {
      if (!x.is_string()) {
        ok = false;
        break;
      }
      out.push_back(x.get<std::string>());
    }
  }
  if (!ok) {
    TypeError(key, expected, *v);
    return def.value_or(std::vector<std::string>{});
  }
  return out;
}

std::pair<int, int> ParamReader::Size(const std::string& key) {
  const char* expected = "an integer >= 1 or an array [height, width] of integers in [1, 65535]";
  const nlohmann::json* v = Lookup(key, expected, true);
  if (v == nullptr) return {1, 1};
  auto valid = [](const nlohmann::json& x) {
    return x.is_number_integer() && x.get<int64_t>() >= 1 && x.get<int64_t>() <= 65535;
  };
  if (valid(*v)) return {v->get<int>(), v->get<int>()};
  if (v->is_array() && v->size() == 2 && valid((*v)[0]) && valid((*v)[1])) {
    return {(*v)[0].get<int>(), (*v)[1].get<int>()};
  }
  TypeError(key, expected, *v);
  return {1, 1};
}

const nlohmann::json* ParamReader::Raw(const std::string& key) {
  known_.insert(key);
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

absl::Status ParamReader::Finish() {
  if (!status_.ok()) return status_;
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (!known_.count(it.key())) {
      std::vector<std::string> allowed(known_.begin(), known_.end());
      return absl::InvalidArgumentError(StrCat(PathOf(it.key()), ": unknown field for ", what_,
                                               "; allowed fields: ", JoinQuoted(allowed)));
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::data
