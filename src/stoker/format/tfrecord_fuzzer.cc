// Fuzzes the TFRecord streaming reader (framing, CRCs, Example decoding) over an in-memory object.
#include "stoker/format/stream_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::format::FuzzStream(data, size, stoker::format::StreamFormat::kTfRecord,
                             "mem://fuzz/input.tfrecord");
  return 0;
}
