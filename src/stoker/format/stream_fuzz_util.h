// Runs a streaming reader of `format` over `bytes` held in the in-memory store, as the readers see
// real objects; shared by the TFRecord and tar fuzzers. Each input also goes through the content
// sniffing (sniff.h): the pure functions, and a stream opened under a name that says no format,
// whose format the content decides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "stoker/format/sample_stream.h"
#include "stoker/format/sniff.h"
#include "stoker/io/url.h"

namespace stoker::format {

inline void DrainStream(const char* url, StreamOptions options) {
  options.chunk_bytes = 4096;  // small chunks exercise reads that span chunks
  auto stream = OpenSampleStream(url, options);
  if (!stream.ok()) return;
  for (int i = 0; i < 100000; ++i) {
    auto sample = (*stream)->Next();
    if (!sample.ok() || !sample->has_value()) break;
  }
}

inline void FuzzStream(const uint8_t* data, size_t size, StreamFormat format, const char* url) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // The sniffing's pure functions.
  std::string_view head = bytes.substr(0, kSniffBytes);
  (void)SniffFormat(head, size);
  for (StreamFormat want :
       {StreamFormat::kAuto, StreamFormat::kTfRecord, StreamFormat::kTar, StreamFormat::kShard}) {
    (void)DecideFormat(head, size, "mem://fuzz/input-00000-of-00001", want);
  }
  // The reader as told `format`, corrupt records failing and skipped.
  for (const char* target_url : {url, "mem://fuzz/input-00000-of-00001"}) {
    auto target = io::OpenUrl(target_url);
    if (!target.ok() || !target->store->Put(target->key, Buffer::Copy(bytes)).ok()) return;
  }
  for (OnCorrupt mode : {OnCorrupt::kFail, OnCorrupt::kSkip}) {
    StreamOptions options;
    options.format = format;
    options.on_corrupt = mode;
    DrainStream(url, options);
  }
  // A name that says nothing: the content decides (and a file of the other format is read too).
  DrainStream("mem://fuzz/input-00000-of-00001", StreamOptions{});
}

}  // namespace stoker::format
