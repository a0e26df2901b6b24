#include "stoker/io/http/http_util.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "stoker/core/strings.h"

namespace stoker::io {

std::string RangeHeaderValue(ByteRange range) {
  if (range.length == ByteRange::kToEnd) return StrCat("bytes=", range.offset, "-");
  return StrCat("bytes=", range.offset, "-", range.offset + range.length - 1);
}

absl::Status HttpStatusToStatus(int http_status, std::string_view url) {
  std::string where = StrCat(url, ": HTTP ", http_status);
  if (http_status == 404) return absl::NotFoundError(StrCat(url, " does not exist (HTTP 404)"));
  if (http_status == 401 || http_status == 403) {
    return absl::PermissionDeniedError(StrCat(where, " (access denied)"));
  }
  if (http_status == 412) return absl::FailedPreconditionError(StrCat(where, " (object changed)"));
  if (http_status == 416)
    return absl::OutOfRangeError(
        StrCat(where, " (range not satisfiable: the read starts past the end of the object)"));
  if (http_status == 429 || http_status >= 500) {
    return absl::UnavailableError(StrCat(where, " (server busy or failing)"));
  }
  return absl::UnknownError(StrCat(where, " (unexpected status)"));
}

absl::StatusOr<Buffer> RangeFromResponse(const HttpResponse& response, ByteRange requested,
                                         std::string_view url) {
  if (response.status == 200) {
    if (requested.offset > response.body.size()) {
      return absl::OutOfRangeError(StrCat("read of ", url, " at offset ", requested.offset,
                                          " is past the end of the object (", response.body.size(),
                                          " bytes)"));
    }
    return response.body.Slice(requested.offset, requested.length);
  }
  if (response.status != 206) return HttpStatusToStatus(response.status, url);
  // Content-Range: bytes first-last/total
  std::string content_range = response.Header("content-range");
  uint64_t first = 0, last = 0;
  size_t dash = content_range.find('-');
  size_t slash = content_range.find('/');
  if (!content_range.starts_with("bytes ") || dash == std::string::npos ||
      slash == std::string::npos || !absl::SimpleAtoi(content_range.substr(6, dash - 6), &first) ||
      !absl::SimpleAtoi(content_range.substr(dash + 1, slash - dash - 1), &last) || last < first) {
    return absl::DataLossError(
        StrCat(url, ": malformed Content-Range '", content_range, "' in a 206 response"));
  }
  uint64_t expected_last =
      requested.length == ByteRange::kToEnd ? last : requested.offset + requested.length - 1;
  // The server may end early only at the end of the object.
  bool ends_at_object_end = content_range.substr(slash + 1) == std::to_string(last + 1);
  if (first != requested.offset ||
      (last != expected_last && !(last < expected_last && ends_at_object_end))) {
    return absl::DataLossError(StrCat(url, ": server returned bytes ", first, "-", last,
                                      " for a request of ", RangeHeaderValue(requested)));
  }
  if (response.body.size() != last - first + 1) {
    return absl::DataLossError(
        StrCat(url, ": short body: ", response.body.size(), " bytes for range ", first, "-", last));
  }
  return response.body;
}

absl::StatusOr<absl::Time> ParseHttpDate(std::string_view value) {
  absl::Time time;
  std::string error;
  // absl::ParseTime also accepts "infinite-past"/"infinite-future"; an HTTP date starts with a day.
  const bool plausible = !value.empty() && std::isupper(static_cast<unsigned char>(value.front()));
  if (!plausible || !absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", ToAbsl(value),
                                     absl::UTCTimeZone(), &time, &error)) {
    return absl::InvalidArgumentError(
        StrCat("bad HTTP date '", value.substr(0, 100),
               "' (want e.g. 'Wed, 12 Oct 2009 17:50:00 GMT'): ", error));
  }
  return time;
}

}  // namespace stoker::io
