// HttpStore: read-only ObjectStore over plain HTTP(S) (http://host[:port]/path). Stat is a HEAD
// (size from Content-Length, ETag, Last-Modified), reads are ranged GETs with retries through the
// shared HttpTransport. List understands nginx's `autoindex_format json` listings; other servers
// have no standard listing (Unimplemented). Writes are Unimplemented. Thread-safe.
#pragma once

#include <string>

#include "stoker/io/http/http_transport.h"
#include "stoker/io/http/http_util.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

class HttpStore : public ObjectStore {
 public:
  // `base`: "http://host:port" or "https://host" (no trailing slash).
  explicit HttpStore(std::string base, HttpTransport* transport = &HttpTransport::Default(),
                     RetryPolicy retry = {});

  std::string Url(std::string_view key) const override;
  void StatAsync(std::string key, StatCallback done) override;
  absl::StatusOr<ListResult> List(const ListOptions& options) override;
  void ReadAsync(ReadRequest request, ReadCallback done) override;
  void ReadToAsync(ReadRequest request, WriteAtFn write, WrittenCallback done) override;
  absl::StatusOr<std::unique_ptr<ObjectWriter>> OpenWriter(std::string_view key) override;
  absl::Status Delete(std::string_view key) override;

 private:
  // One ranged GET with retries; with a sink, the body goes there as it arrives.
  void Get(ReadRequest request, std::shared_ptr<RangeSink> sink, ResponseCheck check,
           HttpCallback done);

  const std::string base_;
  HttpTransport* const transport_;
  const RetryPolicy retry_;
};

}  // namespace stoker::io
