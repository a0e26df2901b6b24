// Fuzz target: arbitrary bytes as a pipeline spec. Parsing must never crash; a spec that parses
// is run for a few elements (sources are limited to small ranges so runs stay short).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "stoker/data/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (spec.is_discarded()) {
    (void)stoker::data::Pipeline::FromString(text);
    return 0;
  }
  // Keep runs short and local: only small ranges, no plugins, no remote data.
  if (!spec.is_object() || spec.contains("plugins")) return 0;
  if (spec.contains("source")) {
    const auto& source = spec["source"];
    if (!source.is_object() || !source.contains("range") || !source["range"].is_number_integer() ||
        source["range"].get<int64_t>() > 64) {
      (void)stoker::data::Pipeline::FromJson(nlohmann::json{{"source", source}});
      spec["source"] = nlohmann::json{{"range", 16}};
    }
  }
  spec["threads"] = 1;
  auto pipeline = stoker::data::Pipeline::FromJson(spec);
  if (!pipeline.ok()) return 0;
  auto it = (*pipeline)->MakeIterator(0);
  for (int i = 0; i < 32; ++i) {
    auto e = it->GetNext();
    if (!e.ok() || !e->has_value()) break;
  }
  return 0;
}
