// S3's XML bodies, parsed with tinyxml2: ListObjectsV2 results, multipart upload documents, and
// <Error> responses mapped onto stoker's error model (object_store.h).
//
// Every parser accepts arbitrary bytes (they are fuzzed) and returns InvalidArgument naming the
// element when a required one is missing or malformed; optional elements may be absent.
//
// Thread safety: pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "stoker/io/object_store.h"

namespace stoker::io::s3 {

struct ListObjectsV2Result {
  // key, size, etag (quotes stripped), mtime (LastModified). Keys are decoded when the response
  // says <EncodingType>url</EncodingType>.
  std::vector<ObjectInfo> contents;
  std::vector<std::string> common_prefixes;
  bool is_truncated = false;
  std::string next_continuation_token;  // empty when not truncated
  int64_t key_count = -1;               // -1 when absent
};

// Parses a ListBucketResult. Required: the root element; Key and Size of each Contents; Prefix of
// each CommonPrefixes; NextContinuationToken when IsTruncated is true.
absl::StatusOr<ListObjectsV2Result> ParseListObjectsV2(std::string_view xml);

// The buckets of a ListAllMyBucketsResult (GET / on the endpoint): key = bucket name, mtime =
// CreationDate (size and etag unset). Required: the root element and each bucket's <Name>.
absl::StatusOr<std::vector<ObjectInfo>> ParseListBuckets(std::string_view xml);

// The UploadId of an InitiateMultipartUploadResult.
absl::StatusOr<std::string> ParseInitiateMultipartUpload(std::string_view xml);

struct CompletedPart {
  int part_number = 0;  // 1..10000
  std::string etag;     // as returned by UploadPart (quotes optional; added when missing)
};

// <CompleteMultipartUpload> with one <Part> per entry, in the order given (S3 wants ascending
// part numbers).
std::string BuildCompleteMultipartUpload(const std::vector<CompletedPart>& parts);

// CompleteMultipartUpload may answer 200 with an <Error> body; this returns the object's ETag
// (quotes stripped) from a CompleteMultipartUploadResult, or the error (via S3ErrorToStatus).
absl::StatusOr<std::string> ParseCompleteMultipartUpload(std::string_view xml, std::string_view url,
                                                         std::string_view access_key_id);

struct S3Error {
  std::string code;  // "NoSuchKey"
  std::string message;
  std::string resource;
  std::string request_id;
};

// The <Error> document in `xml`, or nullopt when `xml` is not one (empty body, other root, not
// XML).
std::optional<S3Error> ParseError(std::string_view xml);

// Maps a failed response onto stoker's error model. `url` is the user-facing URL (s3://bucket/key),
// `access_key_id` is named in permission errors (never the secret). An <Error> body's Code wins
// over the HTTP status; a body-less response (HEAD) is mapped by status alone:
//   NoSuchKey, NoSuchBucket, NoSuchUpload, 404            -> NotFound naming the URL
//   AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch,
//   RequestTimeTooSkewed, ExpiredToken, 401, 403          -> PermissionDenied, key id + what to
//   check InvalidRange, 416                                     -> OutOfRange PreconditionFailed,
//   412                               -> FailedPrecondition SlowDown, InternalError,
//   ServiceUnavailable, 500, 503 -> Unavailable (retryable) anything else -> Unknown with status,
//   code and message
// Returns OK only for a 2xx status with no <Error> body.
absl::Status S3ErrorToStatus(int http_status, std::string_view body, std::string_view url,
                             std::string_view access_key_id);

// Strips one pair of surrounding double quotes (and the W/ weak prefix) from an ETag.
std::string StripETagQuotes(std::string_view etag);

// Parses S3's ISO 8601 timestamps ("2009-10-12T17:50:30.000Z", also without fraction or with a
// +hh:mm offset).
absl::StatusOr<absl::Time> ParseIso8601(std::string_view value);

}  // namespace stoker::io::s3
