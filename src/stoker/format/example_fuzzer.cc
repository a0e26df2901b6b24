// Fuzzes tf.train.Example decoding into a sample.
#include <cstddef>
#include <cstdint>

#include "stoker/format/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::format;
  auto sample = tfrecord::ExampleToSample(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/00000000");
  if (sample.ok()) (void)tfrecord::SampleToExample(*sample);
  return 0;
}
