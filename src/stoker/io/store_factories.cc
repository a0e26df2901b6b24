#include "stoker/io/store_factories.h"

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/io/http/http_store.h"
#include "stoker/io/s3/s3_store.h"
#include "stoker/io/s3/s3_xml.h"

namespace stoker::io {

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeS3StoreFromEnvironment(const std::string& bucket) {
  auto config = s3::S3ConfigFromEnvironment();
  if (!config.ok()) return config.status();
  return std::make_shared<S3Store>(*std::move(config), bucket);
}

absl::StatusOr<std::vector<ObjectInfo>> ListS3BucketsFromEnvironment() {
  auto config = s3::S3ConfigFromEnvironment();
  if (!config.ok()) return config.status();
  S3Store service(*std::move(config), /*bucket=*/"");
  auto response = service.SendSync({"GET", ""});
  if (!response.ok()) return Annotate(response.status(), "listing the buckets (s3://)");
  auto buckets = s3::ParseListBuckets(response->body.view());
  if (!buckets.ok()) return Annotate(buckets.status(), "listing the buckets (s3://)");
  return buckets;
}

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeHttpStore(const std::string& scheme,
                                                           const std::string& host) {
  return std::make_shared<HttpStore>(StrCat(scheme, "://", host));
}

}  // namespace stoker::io
