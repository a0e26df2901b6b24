#include "stoker/io/store_factories.h"

namespace stoker::io {

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeS3StoreFromEnvironment(const std::string& bucket) {
  return absl::UnimplementedError("s3:// is not built yet");
}

absl::StatusOr<std::shared_ptr<ObjectStore>> MakeHttpStore(const std::string& scheme,
                                                           const std::string& host) {
  return absl::UnimplementedError("http(s):// is not built yet");
}

}  // namespace stoker::io
