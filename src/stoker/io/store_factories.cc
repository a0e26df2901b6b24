#include "stoker/io/store_factories.h"

#include "stoker/core/strings.h"
#include "stoker/io/http/http_store.h"

namespace stoker::io {

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeS3StoreFromEnvironment(const std::string& bucket) {
  return absl::UnimplementedError("s3:// is not built yet");
}

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeHttpStore(const std::string& scheme,
                                                           const std::string& host) {
  return std::make_shared<HttpStore>(StrCat(scheme, "://", host));
}

}  // namespace stoker::io
