// Building S3 REST requests: URI encoding by S3's rules, path-style or virtual-hosted addressing,
// and SigV4 signing, producing a URL and header list ready to hand to an HTTP client (curl).
//
// Thread safety: pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "stoker/io/s3/credentials.h"
#include "stoker/io/s3/sigv4.h"

namespace stoker::io::s3 {

// Percent-encodes every byte except the unreserved A-Z a-z 0-9 - _ . ~ (and '/' when
// !encode_slash, for paths). Upper-case hex; a space is %20; UTF-8 is encoded byte by byte.
std::string UriEncode(std::string_view s, bool encode_slash);
// Decodes %XX escapes (and nothing else: '+' stays '+'). InvalidArgument on a bad escape.
absl::StatusOr<std::string> UriDecode(std::string_view s);

// Names and values URI-encoded (with '/'), sorted by name then value, joined as a=1&b=&c=x%2Fy.
std::string CanonicalQueryString(const QueryParams& query);

struct S3Request {
  std::string method;
  // Full URL: scheme://host[:port]/path?query, path and query encoded exactly as signed.
  std::string url;
  // Every header to send, Host first, including the caller's extra headers and the signature
  // headers. Hand them to curl as "Name: value" lines (curl then uses this Host header as is).
  std::vector<HttpHeader> headers;
};

// Builds and signs one request.
//   bucket:  "" for service-level requests (ListBuckets)
//   key:     object key, unencoded ("" for bucket-level requests such as ListObjectsV2)
//   query:   decoded parameters, e.g. {{"list-type","2"},{"prefix","a/b"}}
//   extra_headers: headers to send and sign (Range, Content-Type, If-Match, x-amz-*, ...)
//   payload_hash:  hex SHA-256 of the body (Sha256Hex), kEmptyPayloadSha256, or kUnsignedPayload
// With anonymous credentials the request is not signed (no Authorization, no x-amz-* added).
// InvalidArgument when config.endpoint is not scheme://host[:port][/base].
absl::StatusOr<S3Request> BuildRequest(const S3Config& config, std::string_view method,
                                       std::string_view bucket, std::string_view key,
                                       const QueryParams& query,
                                       const std::vector<HttpHeader>& extra_headers,
                                       std::string_view payload_hash, absl::Time now);

// True when `bucket` can be a DNS label in a virtual-hosted URL (3-63 chars of a-z 0-9 '-', no
// dots, starting and ending with a letter or digit). Other names are always sent path-style.
bool IsVirtualHostableBucket(std::string_view bucket);

}  // namespace stoker::io::s3
