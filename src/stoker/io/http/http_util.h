// Helpers shared by the HTTP-based stores (S3 and plain HTTP).
#pragma once

#include <string>

#include "absl/status/statusor.h"
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

// The bytes of `requested` from a GET response: a 206 must cover exactly the asked range (checked
// against Content-Range), a 200 (server ignored Range) is sliced. Anything else is an error.
absl::StatusOr<Buffer> RangeFromResponse(const HttpResponse& response, ByteRange requested,
                                         std::string_view url);

// Parses an HTTP date (RFC 7231 IMF-fixdate, "Wed, 12 Oct 2009 17:50:00 GMT"), as in
// Last-Modified headers. InvalidArgument otherwise.
absl::StatusOr<absl::Time> ParseHttpDate(std::string_view value);

}  // namespace stoker::io
