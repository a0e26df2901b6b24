// Fuzz target: every S3 XML parser on arbitrary bytes. None may crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stoker/io/s3/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::io::s3;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  (void)ParseListObjectsV2(input);
  (void)ParseListBuckets(input);
  (void)ParseInitiateMultipartUpload(input);
  (void)ParseCompleteMultipartUpload(input, "s3://fuzz/key", "AKIDFUZZ");
  (void)ParseError(input);
  for (int status : {200, 403, 404, 500}) (void)S3ErrorToStatus(status, input, "s3://fuzz/k", "A");
  (void)ParseIso8601(input);
  return 0;
}
