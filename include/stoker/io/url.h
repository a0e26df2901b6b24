// URL routing: which ObjectStore serves a URL, and the key inside it.
//
//   s3://bucket/key          S3 (endpoint and credentials from AWS_* variables, ~/.aws)
//   http://host[:port]/path  HTTP(S), read-only
//   /abs/path, rel/path, file:///abs/path   local files
//   mem://bucket/key         the process's in-memory store named `bucket`
//
// Stores are shared: every OpenUrl for the same scheme and bucket (or host) returns the same
// instance, so connection pools, admission limits and caches are process-wide. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

struct ParsedUrl {
  std::string scheme;  // "s3", "http", "https", "file" or "mem"
  std::string bucket;  // S3 or mem bucket; host[:port] for HTTP; empty for files
  std::string key;     // key within the store (for files: the absolute path without its '/')
};

// Parses `url`; InvalidArgument naming the URL when it is malformed (e.g. "s3://" without bucket).
absl::StatusOr<ParsedUrl> ParseUrl(std::string_view url);

struct StoreAndKey {
  std::shared_ptr<ObjectStore> store;
  std::string key;
};

// The shared store serving `url`, and the key within it.
absl::StatusOr<StoreAndKey> OpenUrl(std::string_view url);

// Joins a folder-like URL or key and a relative name with exactly one '/'.
std::string JoinUrl(std::string_view base, std::string_view name);

}  // namespace stoker::io
