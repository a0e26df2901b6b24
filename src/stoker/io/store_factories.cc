#include "stoker/io/store_factories.h"

#include "stoker/core/strings.h"
#include "stoker/io/http/http_store.h"
#include "stoker/io/s3/s3_store.h"

namespace stoker::io {

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeS3StoreFromEnvironment(const std::string& bucket) {
  auto config = s3::S3ConfigFromEnvironment();
  if (!config.ok()) return config.status();
  return std::make_shared<S3Store>(*std::move(config), bucket);
}

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeHttpStore(const std::string& scheme,
                                                           const std::string& host) {
  return std::make_shared<HttpStore>(StrCat(scheme, "://", host));
}

}  // namespace stoker::io
