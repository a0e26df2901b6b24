#include "stoker/io/http/http_util.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "stoker/core/status.h"
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

absl::StatusOr<RangeInBody> LocateRange(const HttpResponse& response, uint64_t body_size,
                                        ByteRange requested, std::string_view url) {
  if (response.status == 200) {
    if (requested.offset > body_size) {
      return absl::OutOfRangeError(StrCat("read of ", url, " at offset ", requested.offset,
                                          " is past the end of the object (", body_size,
                                          " bytes)"));
    }
    return RangeInBody{requested.offset, std::min(requested.length, body_size - requested.offset)};
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
  if (body_size != last - first + 1) {
    return absl::DataLossError(
        StrCat(url, ": short body: ", body_size, " bytes for range ", first, "-", last));
  }
  return RangeInBody{0, body_size};
}

absl::StatusOr<Buffer> RangeFromResponse(const HttpResponse& response, ByteRange requested,
                                         std::string_view url) {
  ASSIGN_OR_RETURN(RangeInBody in_body,
                   LocateRange(response, response.body.size(), requested, url));
  return response.body.Slice(in_body.skip, in_body.length);
}

bool RangeSink::Accept(int status, const HttpHeaders& headers) {
  position_ = 0;
  HttpResponse head{status, headers};
  uint64_t length = 0;
  if (!absl::SimpleAtoi(head.Header("content-length"), &length)) return false;
  absl::StatusOr<RangeInBody> located = LocateRange(head, length, requested_, url_);
  if (!located.ok()) return false;  // kept, so that Finish reports it with the body
  located_ = *located;
  return true;
}

bool RangeSink::Write(std::string_view data) {
  const uint64_t begin = position_;
  position_ += data.size();
  const uint64_t from = std::max(begin, located_.skip);
  const uint64_t to = std::min(position_, located_.skip + located_.length);
  if (from >= to) return true;
  absl::Status status = write_(from - located_.skip, data.substr(from - begin, to - from));
  if (status.ok()) return true;
  absl::MutexLock lock(&mu_);
  error_ = std::move(status);
  return false;
}

absl::Status RangeSink::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::StatusOr<uint64_t> RangeSink::Finish(const HttpResponse& response) {
  if (response.body_sunk) return located_.length;  // its length was checked against Content-Length
  ASSIGN_OR_RETURN(Buffer bytes, RangeFromResponse(response, requested_, url_));
  if (!bytes.empty()) RETURN_IF_ERROR(write_(0, bytes.view()));
  return bytes.size();
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
