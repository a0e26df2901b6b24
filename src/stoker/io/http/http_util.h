// Helpers shared by the HTTP-based stores (S3 and plain HTTP).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stoker/io/http/http_transport.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

// "bytes=a-b" (or "bytes=a-" for kToEnd). The range must not be empty.
std::string RangeHeaderValue(ByteRange range);

// Maps a non-2xx status without a parseable body to a Status naming `url`: 404 NotFound,
// 401/403 PermissionDenied, 412 FailedPrecondition, 416 OutOfRange, 429 and 5xx Unavailable
// (retried), anything else Unknown.
absl::Status HttpStatusToStatus(int http_status, std::string_view url);

// Where the bytes of `requested` lie in a GET response's body of `body_size` bytes: a 206 must
// cover exactly the asked range (checked against Content-Range) and have all of it; a 200 (the
// server ignored Range) holds the whole object, cut at the range. Anything else is an error.
struct RangeInBody {
  uint64_t skip = 0;    // body bytes before the range
  uint64_t length = 0;  // bytes of the range (shorter than asked only at the object's end)
};
absl::StatusOr<RangeInBody> LocateRange(const HttpResponse& response, uint64_t body_size,
                                        ByteRange requested, std::string_view url);

// The bytes of `requested` from a GET response whose body was kept (LocateRange's rules).
absl::StatusOr<Buffer> RangeFromResponse(const HttpResponse& response, ByteRange requested,
                                         std::string_view url);

// The body sink of a network store's ReadToAsync: writes the bytes of `requested` to `write` as a
// GET response arrives, when LocateRange places them by its Content-Length; any other response
// (an error, a body of unannounced length) is kept whole for Finish to judge. One sink serves
// every attempt of one read; a retry writes the same offsets again. Thread-compatible: the
// transport thread calls Accept and Write, the retry loop error() and Finish between attempts.
class RangeSink : public BodySink {
 public:
  RangeSink(ByteRange requested, std::string url, WriteAtFn write)
      : requested_(requested), url_(std::move(url)), write_(std::move(write)) {}

  bool Accept(int status, const HttpHeaders& headers) override;
  bool Write(std::string_view data) override;

  // The write error that stopped a transfer (OK if none): the read fails with it, not retried.
  absl::Status error() const;
  // After an attempt: the number of bytes of the range written (a kept body is located and
  // written now), or why the response holds no such bytes.
  absl::StatusOr<uint64_t> Finish(const HttpResponse& response);

 private:
  const ByteRange requested_;
  const std::string url_;
  WriteAtFn write_;
  RangeInBody located_;
  uint64_t position_ = 0;  // body bytes seen in this attempt
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Parses an HTTP date (RFC 7231 IMF-fixdate, "Wed, 12 Oct 2009 17:50:00 GMT"), as in
// Last-Modified headers. InvalidArgument otherwise.
absl::StatusOr<absl::Time> ParseHttpDate(std::string_view value);

}  // namespace stoker::io
