// AWS Signature Version 4 (header-based), written by hand over OpenSSL. Each step is exposed so
// tests can check it against AWS's published examples:
//   CanonicalRequest -> StringToSign -> SigningKey -> Signature -> Authorization header.
// The time is always passed in; nothing here reads the clock.
//
// Thread safety: pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "stoker/io/s3/credentials.h"

namespace stoker::io::s3 {

// An HTTP header as sent (name case as given; the signer lower-cases names for signing).
struct HttpHeader {
  std::string name;
  std::string value;
  bool operator==(const HttpHeader&) const = default;
};

// Query parameters, decoded (the signer and the request builder encode them). A parameter with no
// value ("?uploads") has an empty value. Order does not matter.
using QueryParams = std::vector<std::pair<std::string, std::string>>;

// x-amz-content-sha256 for a body whose hash is not computed (allowed by S3 over TLS and by S3
// servers in general), and the hash of the empty body.
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Lower-case hex SHA-256 of `bytes`.
std::string Sha256Hex(std::string_view bytes);
// Raw (32-byte) HMAC-SHA256 of `data` with `key`.
std::string HmacSha256(std::string_view key, std::string_view data);
std::string HexEncode(std::string_view bytes);

// "20130524T000000Z" and "20130524" (UTC).
std::string AmzDate(absl::Time time);
std::string DateStamp(absl::Time time);
// "20130524/us-east-1/s3/aws4_request".
std::string CredentialScope(absl::Time time, std::string_view region, std::string_view service);

// A request as the signer sees it. `headers` are exactly the headers to sign, including Host and
// X-Amz-Date (and X-Amz-Content-Sha256 for S3); SignRequest below fills those in for you.
struct CanonicalInput {
  std::string method;         // "GET"
  std::string canonical_uri;  // the URI-encoded path as sent, e.g. "/test%24file.text"; "" = "/"
  QueryParams query;          // decoded
  std::vector<HttpHeader> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or kUnsignedPayload
};

// "host;range;x-amz-date": lower-cased names, sorted, de-duplicated.
std::string SignedHeaders(const std::vector<HttpHeader>& headers);
// Method \n URI \n canonical query \n canonical headers \n \n signed headers \n payload hash.
// Header values are trimmed and inner runs of spaces collapsed; repeated names are joined by ','.
std::string CanonicalRequest(const CanonicalInput& input);
// "AWS4-HMAC-SHA256\n<amz date>\n<scope>\n<hex sha256 of canonical request>".
std::string StringToSign(absl::Time time, std::string_view credential_scope,
                         std::string_view canonical_request);
// Raw 32-byte key: HMAC chain over "AWS4"+secret, date, region, service, "aws4_request".
std::string SigningKey(std::string_view secret_access_key, absl::Time time, std::string_view region,
                       std::string_view service);
// Lower-case hex HMAC-SHA256 of the string to sign.
std::string Signature(std::string_view signing_key, std::string_view string_to_sign);

// Everything needed to sign one request.
struct SignInput {
  std::string method;
  std::string host;           // as in the Host header: "bucket.s3.amazonaws.com", "127.0.0.1:8080"
  std::string canonical_uri;  // URI-encoded path
  QueryParams query;
  // Other headers to sign (Range, Content-Type, Content-MD5, x-amz-*, ...). Must not contain
  // Host, Authorization, X-Amz-Date, X-Amz-Content-Sha256 or X-Amz-Security-Token.
  std::vector<HttpHeader> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or kUnsignedPayload
  std::string region;
  std::string service = "s3";
  Credentials credentials;  // must not be anonymous
  absl::Time time;
};

// The signing steps of one request, for tests and debugging (holds no secret).
struct SignedRequest {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;
  // The headers to add to the request: X-Amz-Date, X-Amz-Content-Sha256, X-Amz-Security-Token
  // (when a session token is set) and Authorization. Host and input.headers are not repeated.
  std::vector<HttpHeader> headers_to_add;
};

// Signs for S3 (x-amz-content-sha256 is signed and sent).
SignedRequest SignRequest(const SignInput& input);

}  // namespace stoker::io::s3
