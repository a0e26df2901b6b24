// manifest.json of a stoker dataset (docs/format.md, "A dataset").
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::format {

inline constexpr std::string_view kManifestName = "manifest.json";
inline constexpr int kManifestVersion = 1;

struct ManifestShard {
  std::string name;  // relative to the dataset prefix
  uint64_t samples = 0;
  uint64_t bytes = 0;
  bool operator==(const ManifestShard&) const = default;
};

struct Manifest {
  std::vector<ManifestShard> shards;
  std::vector<std::string> fields;  // sorted union of field names
  uint64_t total_samples = 0;
  uint64_t total_bytes = 0;
  // Class names of a converted folder tree: the sorted class folders (empty ones too, as
  // torchvision's ImageFolder), so class i is classes[i] and samples carry field "cls" = i.
  // Empty for WebDataset / TFRecord sources and for manifests written before classes existed.
  std::vector<std::string> classes;
  bool operator==(const Manifest&) const = default;
};

// Parses and validates (format, version, totals, names); errors say which field is wrong, prefixed
// by `url` for messages.
absl::StatusOr<Manifest> ParseManifest(std::string_view json, std::string_view url);
// Pretty-printed JSON.
std::string SerializeManifest(const Manifest& manifest);

}  // namespace stoker::format
