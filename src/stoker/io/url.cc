#include "stoker/io/url.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "stoker/core/strings.h"
#include "stoker/io/local/local_store.h"
#include "stoker/io/memory_store.h"
#include "stoker/io/store_factories.h"

namespace stoker::io {

absl::StatusOr<ParsedUrl> ParseUrl(std::string_view url) {
  auto split_bucket = [&](std::string_view scheme,
                          std::string_view rest) -> absl::StatusOr<ParsedUrl> {
    size_t slash = rest.find('/');
    std::string bucket(rest.substr(0, slash));
    if (bucket.empty()) {
      return absl::InvalidArgumentError(
          StrCat("URL '", url, "' has no ", scheme == "s3" || scheme == "mem" ? "bucket" : "host",
                 " (expected ", scheme, "://",
                 scheme == "s3" || scheme == "mem" ? "bucket" : "host", "/key)"));
    }
    std::string key = slash == std::string_view::npos ? "" : std::string(rest.substr(slash + 1));
    return ParsedUrl{std::string(scheme), std::move(bucket), std::move(key)};
  };
  for (std::string_view scheme : {"s3", "http", "https", "mem"}) {
    std::string head = StrCat(scheme, "://");
    if (url.starts_with(head)) return split_bucket(scheme, url.substr(head.size()));
  }
  std::string_view path = url;
  if (url.starts_with("file://")) {
    path = url.substr(7);
    if (!path.starts_with("/")) {
      return absl::InvalidArgumentError(
          StrCat("URL '", url, "' is not an absolute file URL (expected file:///path)"));
    }
  } else if (size_t colon = url.find("://"); colon != std::string_view::npos) {
    return absl::InvalidArgumentError(
        StrCat("URL '", url, "' has an unsupported scheme '", url.substr(0, colon),
               "' (supported: s3://, http://, https://, file://, mem://, or a local path)"));
  }
  if (path.empty()) return absl::InvalidArgumentError("empty URL");
  std::string absolute = std::filesystem::absolute(std::filesystem::path(path)).lexically_normal();
  // lexically_normal keeps a trailing '/' for folders, which List prefixes rely on.
  return ParsedUrl{"file", "", absolute.substr(1)};
}

absl::StatusOr<StoreAndKey> OpenUrl(std::string_view url) {
  auto parsed = ParseUrl(url);
  if (!parsed.ok()) return parsed.status();
  static std::mutex mu;
  static auto* stores = new std::map<std::string, std::shared_ptr<ObjectStore>>();
  std::string id = StrCat(parsed->scheme, "://", parsed->bucket);
  std::lock_guard<std::mutex> lock(mu);
  auto& store = (*stores)[id];
  if (!store) {
    if (parsed->scheme == "file") {
      store = std::make_shared<LocalStore>();
    } else if (parsed->scheme == "mem") {
      store = std::make_shared<MemoryStore>(parsed->bucket);
    } else {
      auto made = parsed->scheme == "s3" ? MakeS3StoreFromEnvironment(parsed->bucket)
                                         : MakeHttpStore(parsed->scheme, parsed->bucket);
      if (!made.ok()) {
        stores->erase(id);
        return made.status();
      }
      store = *std::move(made);
    }
  }
  return StoreAndKey{store, std::move(parsed->key)};
}

std::string JoinUrl(std::string_view base, std::string_view name) {
  if (base.empty()) return std::string(name);
  if (base.ends_with("/")) base.remove_suffix(1);
  if (name.starts_with("/")) name.remove_prefix(1);
  return StrCat(base, "/", name);
}

}  // namespace stoker::io
