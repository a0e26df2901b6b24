// Fuzzes the WebDataset tar streaming reader (headers, GNU/pax names, path checks, grouping).
#include "stoker/format/stream_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::format::FuzzStream(data, size, stoker::format::StreamFormat::kTar,
                             "mem://fuzz/input.tar");
  return 0;
}
