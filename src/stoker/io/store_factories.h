// Constructors of the network stores, for url.cc (which routes URLs to them). Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

// An S3 store for `bucket`, configured from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws/credentials.
absl::StatusOr<std::shared_ptr<ObjectStore>> MakeS3StoreFromEnvironment(const std::string& bucket);

// The buckets those credentials can see (GET / on the endpoint), for `stoker ls s3://`: key =
// bucket name, mtime = creation date.
absl::StatusOr<std::vector<ObjectInfo>> ListS3BucketsFromEnvironment();

// A read-only store over `scheme`://`host` ("http" or "https").
absl::StatusOr<std::shared_ptr<ObjectStore>> MakeHttpStore(const std::string& scheme,
                                                           const std::string& host);

}  // namespace stoker::io
