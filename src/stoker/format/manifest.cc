#include "stoker/format/manifest.h"

#include <nlohmann/json.hpp>
#include <set>

#include "stoker/core/strings.h"

namespace stoker::format {
namespace {

constexpr std::string_view kFormatName = "stoker-dataset";

absl::Status Bad(std::string_view url, std::string_view what) {
  return absl::DataLossError(
      StrCat(url, ": ", what, " (the manifest is damaged; re-run `stoker convert`)"));
}

bool GetCount(const nlohmann::json& object, const char* name, uint64_t* out) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

}  // namespace

absl::StatusOr<Manifest> ParseManifest(std::string_view json, std::string_view url) {
  nlohmann::json doc = nlohmann::json::parse(json.begin(), json.end(), nullptr,
                                             /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Bad(url, "not valid JSON");
  if (!doc.is_object()) return Bad(url, "not a JSON object");
  auto format = doc.find("format");
  if (format == doc.end() || !format->is_string() || format->get<std::string>() != kFormatName) {
    return Bad(url, StrCat("field 'format' must be \"", kFormatName, "\""));
  }
  uint64_t version = 0;
  if (!GetCount(doc, "version", &version)) return Bad(url, "field 'version' is missing");
  if (version != static_cast<uint64_t>(kManifestVersion)) {
    return absl::FailedPreconditionError(
        StrCat(url, ": manifest version ", version, " is not supported (this stoker reads version ",
               kManifestVersion, "; upgrade stoker or re-run `stoker convert`)"));
  }
  Manifest manifest;
  auto shards = doc.find("shards");
  if (shards == doc.end() || !shards->is_array())
    return Bad(url, "field 'shards' must be an array");
  std::set<std::string> names;
  uint64_t samples = 0, bytes = 0;
  for (size_t i = 0; i < shards->size(); ++i) {
    const nlohmann::json& s = (*shards)[i];
    std::string where = StrCat("shards[", i, "]");
    if (!s.is_object()) return Bad(url, StrCat(where, " must be an object"));
    ManifestShard shard;
    auto name = s.find("name");
    if (name == s.end() || !name->is_string() || name->get<std::string>().empty()) {
      return Bad(url, StrCat(where, ".name must be a non-empty string"));
    }
    shard.name = name->get<std::string>();
    if (shard.name.starts_with("/") || shard.name.find("..") != std::string::npos) {
      return Bad(url, StrCat(where, ".name must be relative to the dataset without '..'"));
    }
    if (!names.insert(shard.name).second) return Bad(url, StrCat(where, ".name is repeated"));
    if (!GetCount(s, "samples", &shard.samples)) {
      return Bad(url, StrCat(where, ".samples must be a non-negative integer"));
    }
    if (!GetCount(s, "bytes", &shard.bytes)) {
      return Bad(url, StrCat(where, ".bytes must be a non-negative integer"));
    }
    if (samples + shard.samples < samples || bytes + shard.bytes < bytes) {
      return Bad(url, "totals overflow");
    }
    samples += shard.samples;
    bytes += shard.bytes;
    manifest.shards.push_back(std::move(shard));
  }
  auto fields = doc.find("fields");
  if (fields == doc.end() || !fields->is_array())
    return Bad(url, "field 'fields' must be an array");
  for (const nlohmann::json& f : *fields) {
    if (!f.is_string()) return Bad(url, "'fields' must hold strings");
    manifest.fields.push_back(f.get<std::string>());
  }
  auto classes = doc.find("classes");  // optional
  if (classes != doc.end()) {
    if (!classes->is_array()) return Bad(url, "field 'classes' must be an array of class names");
    std::set<std::string> seen;
    for (size_t i = 0; i < classes->size(); ++i) {
      const nlohmann::json& c = (*classes)[i];
      if (!c.is_string() || c.get<std::string>().empty()) {
        return Bad(url, StrCat("classes[", i, "] must be a non-empty string"));
      }
      if (!seen.insert(c.get<std::string>()).second) {
        return Bad(url, StrCat("classes[", i, "] ('", c.get<std::string>(), "') is repeated"));
      }
      manifest.classes.push_back(c.get<std::string>());
    }
  }
  if (!GetCount(doc, "total_samples", &manifest.total_samples) ||
      !GetCount(doc, "total_bytes", &manifest.total_bytes)) {
    return Bad(url, "fields 'total_samples' and 'total_bytes' must be non-negative integers");
  }
  if (manifest.total_samples != samples || manifest.total_bytes != bytes) {
    return Bad(url, StrCat("totals (", manifest.total_samples, " samples, ", manifest.total_bytes,
                           " bytes) disagree with the shard list (", samples, " samples, ", bytes,
                           " bytes)"));
  }
  return manifest;
}

std::string SerializeManifest(const Manifest& manifest) {
  nlohmann::ordered_json doc;
  doc["format"] = kFormatName;
  doc["version"] = kManifestVersion;
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const ManifestShard& s : manifest.shards) {
    nlohmann::ordered_json entry;
    entry["name"] = s.name;
    entry["samples"] = s.samples;
    entry["bytes"] = s.bytes;
    shards.push_back(std::move(entry));
  }
  doc["shards"] = std::move(shards);
  doc["fields"] = manifest.fields;
  if (!manifest.classes.empty()) doc["classes"] = manifest.classes;
  doc["total_samples"] = manifest.total_samples;
  doc["total_bytes"] = manifest.total_bytes;
  return doc.dump(2) + "\n";
}

}  // namespace stoker::format
