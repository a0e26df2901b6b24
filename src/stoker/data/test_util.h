// Helpers shared by the data/ unit tests (not part of the library).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stoker/data/pipeline.h"

namespace stoker::data::testing {

inline std::shared_ptr<const Pipeline> MustBuild(const nlohmann::json& spec) {
  auto p = Pipeline::FromJson(spec);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

// Runs one epoch (or up to `limit` elements).
inline std::vector<Element> RunAll(const nlohmann::json& spec, int threads = 1, int64_t epoch = 0,
                                   size_t limit = SIZE_MAX) {
  std::vector<Element> out;
  auto pipeline = MustBuild(spec);
  if (!pipeline) return out;
  auto it = pipeline->MakeIterator(epoch, threads);
  while (out.size() < limit) {
    auto e = it->GetNext();
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok() || !e->has_value()) break;
    out.push_back(std::move(**e));
  }
  return out;
}

inline std::vector<std::string> Keys(const std::vector<Element>& elements) {
  std::vector<std::string> keys;
  for (const auto& e : elements) keys.insert(keys.end(), e.keys.begin(), e.keys.end());
  return keys;
}

inline std::vector<int64_t> Int64s(const Tensor& t) {
  std::vector<int64_t> v(t.NumValues());
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(int64_t));
  return v;
}

// The first error the pipeline reports (building or running), or OK.
inline absl::Status FirstError(const nlohmann::json& spec) {
  auto p = Pipeline::FromJson(spec);
  if (!p.ok()) return p.status();
  auto it = (*p)->MakeIterator(0, 1);
  while (true) {
    auto e = it->GetNext();
    if (!e.ok()) return e.status();
    if (!e->has_value()) return absl::OkStatus();
  }
}

}  // namespace stoker::data::testing
