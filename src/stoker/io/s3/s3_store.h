// S3Store: one bucket of an S3-compatible object store as an ObjectStore (s3://bucket/key).
//
// Every request is signed with SigV4 (sigv4.h) afresh for each attempt, sent through the shared
// HttpTransport (process-wide admission limit, keep-alive pool) and retried per retry.h. Errors map
// through S3ErrorToStatus (s3_xml.h): they name the s3:// URL, and for permission problems the
// access key id, never the secret.
//
// Writes: an object smaller than `multipart_threshold` is one PUT; larger ones become a multipart
// upload of `part_size` parts, up to `parts_in_flight` uploading at once, completed by Close() and
// aborted if the writer is dropped or fails (no orphaned parts are left behind knowingly).
//
// Thread-safe (writers: one thread each).
#pragma once

#include <memory>
#include <string>

#include "stoker/io/http/http_transport.h"
#include "stoker/io/http/http_util.h"
#include "stoker/io/object_store.h"
#include "stoker/io/s3/credentials.h"
#include "stoker/io/s3/sigv4.h"

namespace stoker::io {

struct S3StoreOptions {
  RetryPolicy retry;
  uint64_t multipart_threshold = 8 << 20;
  uint64_t part_size = 8 << 20;  // S3 requires >= 5 MiB for every part but the last
  int parts_in_flight = 4;       // per writer
  // Hash and sign request bodies (x-amz-content-sha256) instead of sending UNSIGNED-PAYLOAD.
  bool sign_payload = false;
  int list_page_size = 1000;  // objects per ListObjectsV2 request (S3's maximum)
};

class S3Store : public ObjectStore {
 public:
  S3Store(s3::S3Config config, std::string bucket, S3StoreOptions options = {},
          HttpTransport* transport = &HttpTransport::Default());

  std::string Url(std::string_view key) const override;
  void StatAsync(std::string key, StatCallback done) override;
  absl::StatusOr<ListResult> List(const ListOptions& options) override;
  void ReadAsync(ReadRequest request, ReadCallback done) override;
  void ReadToAsync(ReadRequest request, WriteAtFn write, WrittenCallback done) override;
  absl::StatusOr<std::unique_ptr<ObjectWriter>> OpenWriter(std::string_view key) override;
  absl::Status Delete(std::string_view key) override;

  // One signed S3 request with retries. `check` turns a 2xx response into the result (nullptr:
  // deliver it as is); non-2xx responses become errors via S3ErrorToStatus. Used by the writer.
  struct Call {
    std::string method;
    std::string key;
    s3::QueryParams query;
    std::vector<s3::HttpHeader> headers;
    Buffer body;
    // A GET's body goes here as it arrives when set (ReadToAsync).
    std::shared_ptr<RangeSink> sink;
  };
  void Send(Call call, ResponseCheck check, HttpCallback done);
  absl::StatusOr<HttpResponse> SendSync(Call call, ResponseCheck check = nullptr);

  const S3StoreOptions& options() const { return options_; }

 private:
  const s3::S3Config config_;
  const std::string bucket_;
  const S3StoreOptions options_;
  HttpTransport* const transport_;
};

}  // namespace stoker::io
