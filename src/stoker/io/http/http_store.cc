#include "stoker/io/http/http_store.h"

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/io/http/http_util.h"
#include "stoker/io/memory_store.h"

namespace stoker::io {
namespace {

// Percent-encodes a key for a URL path ('/' kept).
std::string EncodePath(std::string_view key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', hex[c >> 4], hex[c & 15]};
    }
  }
  return out;
}

// Last-Modified and listing times; the epoch when the server sent none or a malformed one.
absl::Time HttpTimeOrEpoch(const std::string& value) {
  auto time = ParseHttpDate(value);
  return time.ok() ? *time : absl::UnixEpoch();
}

}  // namespace

HttpStore::HttpStore(std::string base, HttpTransport* transport, RetryPolicy retry)
    : base_(std::move(base)), transport_(transport), retry_(retry) {}

std::string HttpStore::Url(std::string_view key) const { return StrCat(base_, "/", key); }

void HttpStore::StatAsync(std::string key, StatCallback done) {
  std::string url = StrCat(base_, "/", EncodePath(key));
  std::string display = Url(key);
  SendWithRetries(
      *transport_, retry_,
      [url](int) -> absl::StatusOr<HttpRequest> {
        return HttpRequest{"HEAD", url};
      },
      [display](HttpResponse r) -> absl::StatusOr<HttpResponse> {
        if (r.status != 200) return HttpStatusToStatus(r.status, display);
        return r;
      },
      [key, display, done = std::move(done)](absl::StatusOr<HttpResponse> response) mutable {
        if (!response.ok()) return std::move(done)(response.status());
        ObjectInfo info;
        info.key = key;
        if (!absl::SimpleAtoi(response->Header("content-length"), &info.size)) {
          return std::move(done)(absl::UnimplementedError(
              StrCat(display, ": the server sent no Content-Length, so its size is unknown")));
        }
        info.etag = response->Header("etag");
        info.mtime = HttpTimeOrEpoch(response->Header("last-modified"));
        std::move(done)(std::move(info));
      });
}

absl::StatusOr<ListResult> HttpStore::List(const ListOptions& options) {
  // nginx autoindex json lists one folder; walk folders below the prefix's folder.
  std::string folder = options.prefix.substr(0, options.prefix.rfind('/') + 1);
  std::vector<std::string> pending = {folder};
  std::vector<ObjectInfo> found;
  while (!pending.empty()) {
    std::string dir = pending.back();
    pending.pop_back();
    ASSIGN_OR_RETURN(HttpResponse response,
                     transport_->SendSync(HttpRequest{"GET", StrCat(base_, "/", EncodePath(dir))}));
    // A folder that does not exist lists nothing, as a prefix with nothing under it does in S3
    // and the local store (io/store_conformance_test.cc).
    if (response.status == 404) continue;
    if (response.status != 200) return HttpStatusToStatus(response.status, Url(dir));
    auto listing = nlohmann::json::parse(response.body.view(), nullptr, /*allow_exceptions=*/false);
    if (!listing.is_array()) {
      return absl::UnimplementedError(
          StrCat(Url(dir),
                 " is not a JSON folder listing; HTTP listings need nginx with "
                 "`autoindex on; autoindex_format json;`"));
    }
    for (const auto& entry : listing) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) continue;
      std::string key = dir + entry["name"].get<std::string>();
      bool is_dir = entry.value("type", "") == "directory";
      if (is_dir) {
        key += "/";
        if (!key.starts_with(options.prefix) && !options.prefix.starts_with(key)) continue;
        if (options.delimiter.empty() || options.prefix.starts_with(key)) {
          pending.push_back(key);
        } else {
          found.push_back(ObjectInfo{key, 0, "", absl::UnixEpoch()});
        }
        continue;
      }
      ObjectInfo info{key, entry.value("size", uint64_t{0}), "", absl::UnixEpoch()};
      if (entry.contains("mtime") && entry["mtime"].is_string()) {
        info.mtime = HttpTimeOrEpoch(entry["mtime"].get<std::string>());
      }
      found.push_back(std::move(info));
    }
  }
  std::sort(found.begin(), found.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return ListFromSorted(found, options);
}

void HttpStore::ReadAsync(ReadRequest request, ReadCallback done) {
  std::string display = Url(request.key);
  if (request.range.length == 0) {
    // An empty range cannot be expressed as an HTTP Range; check the offset against the size.
    // Asynchronously: this may run on the transport thread, which must never wait on a request.
    uint64_t offset = request.range.offset;
    return StatAsync(request.key, [offset, display, done = std::move(done)](
                                      absl::StatusOr<ObjectInfo> info) mutable {
      if (!info.ok()) return std::move(done)(info.status());
      if (offset > info->size) {
        return std::move(done)(absl::OutOfRangeError(
            StrCat("read of ", display, " at offset ", offset, " is past the end of the object (",
                   info->size, " bytes)")));
      }
      std::move(done)(Buffer());
    });
  }
  ByteRange range = request.range;
  Get(
      std::move(request), nullptr,
      [display, range](HttpResponse r) -> absl::StatusOr<HttpResponse> {
        ASSIGN_OR_RETURN(r.body, RangeFromResponse(r, range, display));
        return r;
      },
      [done = std::move(done)](absl::StatusOr<HttpResponse> r) mutable {
        if (!r.ok()) return std::move(done)(r.status());
        std::move(done)(std::move(r->body));
      });
}

void HttpStore::ReadToAsync(ReadRequest request, WriteAtFn write, WrittenCallback done) {
  if (request.range.length == 0) {
    return ObjectStore::ReadToAsync(std::move(request), std::move(write), std::move(done));
  }
  auto sink = std::make_shared<RangeSink>(request.range, Url(request.key), std::move(write));
  auto written = std::make_shared<uint64_t>(0);
  Get(
      std::move(request), sink,
      [sink, written](HttpResponse r) -> absl::StatusOr<HttpResponse> {
        ASSIGN_OR_RETURN(*written, sink->Finish(r));
        return r;
      },
      [sink, written, done = std::move(done)](absl::StatusOr<HttpResponse> r) mutable {
        if (!r.ok()) {
          absl::Status write_error = sink->error();
          return std::move(done)(write_error.ok() ? r.status() : write_error);
        }
        std::move(done)(*written);
      });
}

void HttpStore::Get(ReadRequest request, std::shared_ptr<RangeSink> sink, ResponseCheck check,
                    HttpCallback done) {
  std::string url = StrCat(base_, "/", EncodePath(request.key));
  SendWithRetries(
      *transport_, retry_,
      [url, range = request.range, if_match = request.if_match,
       sink](int) -> absl::StatusOr<HttpRequest> {
        // A write that failed stops the read: it is not the store's failure to retry.
        if (sink != nullptr) RETURN_IF_ERROR(sink->error());
        HttpRequest r{"GET", url};
        r.headers.emplace_back("Range", RangeHeaderValue(range));
        if (!if_match.empty()) r.headers.emplace_back("If-Match", if_match);
        r.body_sink = sink;
        return r;
      },
      std::move(check), std::move(done));
}

absl::StatusOr<std::unique_ptr<ObjectWriter>> HttpStore::OpenWriter(std::string_view key) {
  return absl::UnimplementedError(StrCat(Url(key), ": HTTP URLs are read-only"));
}

absl::Status HttpStore::Delete(std::string_view key) {
  return absl::UnimplementedError(StrCat(Url(key), ": HTTP URLs are read-only"));
}

}  // namespace stoker::io
