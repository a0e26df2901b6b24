// Runs a streaming reader of `format` over `bytes` held in the in-memory store, as the readers see
// real objects; shared by the TFRecord and tar fuzzers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "stoker/format/sample_stream.h"
#include "stoker/io/url.h"

namespace stoker::format {

inline void FuzzStream(const uint8_t* data, size_t size, StreamFormat format, const char* url) {
  auto target = io::OpenUrl(url);
  if (!target.ok()) return;
  if (!target->store
           ->Put(target->key,
                 Buffer::Copy(std::string_view(reinterpret_cast<const char*>(data), size)))
           .ok()) {
    return;
  }
  for (OnCorrupt mode : {OnCorrupt::kFail, OnCorrupt::kSkip}) {
    StreamOptions options;
    options.format = format;
    options.on_corrupt = mode;
    options.chunk_bytes = 4096;  // small chunks exercise reads that span chunks
    auto stream = OpenSampleStream(url, options);
    if (!stream.ok()) continue;
    for (int i = 0; i < 100000; ++i) {
      auto sample = (*stream)->Next();
      if (!sample.ok() || !sample->has_value()) break;
    }
  }
}

}  // namespace stoker::format
