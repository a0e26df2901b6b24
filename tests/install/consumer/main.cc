// A program built outside the stoker tree against an installed stoker (find_package(stoker) or
// pkg-config): it writes and reads an object through the object-store layer, then runs a pipeline
// whose op comes from a plugin built against the installed headers. Prints "ok" on success.
//
// usage: stoker_consumer PLUGIN.so
#include <cstdio>
#include <string>

#include "stoker/core/buffer.h"
#include "stoker/core/status.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/source.h"
#include "stoker/io/url.h"

namespace {

absl::Status Run(const std::string& plugin) {
  ASSIGN_OR_RETURN(stoker::io::StoreAndKey target, stoker::io::OpenUrl("mem://consumer/hello"));
  RETURN_IF_ERROR(target.store->Put(target.key, stoker::Buffer::FromString("hello")));
  ASSIGN_OR_RETURN(stoker::Buffer read, target.store->Read(target.key));
  if (read.ToString() != "hello") return absl::InternalError("read back " + read.ToString());

  std::vector<stoker::data::Element> samples;
  for (int i = 0; i < 3; ++i) {
    stoker::MutableBuffer bytes(2);
    bytes.data()[0] = static_cast<uint8_t>(i);
    bytes.data()[1] = static_cast<uint8_t>(100 + i);
    stoker::data::Element e;
    e.keys = {"sample-" + std::to_string(i)};
    e.sample_index = static_cast<uint64_t>(i);
    e.fields["x"] =
        stoker::data::Tensor{stoker::data::DType::kUint8, {2}, std::move(bytes).Finish()};
    samples.push_back(std::move(e));
  }
  stoker::data::RegisterMemoryDataset("consumer", std::move(samples));
  std::string spec = R"({"plugins": [")" + plugin + R"("],
      "source": {"memory": "consumer"},
      "ops": [{"op": "invert", "field": "x"}, {"op": "batch", "size": 3}]})";
  ASSIGN_OR_RETURN(auto pipeline, stoker::data::Pipeline::FromString(spec));
  auto it = pipeline->MakeIterator(/*epoch=*/0);
  ASSIGN_OR_RETURN(std::optional<stoker::data::Element> batch, it->GetNext());
  if (!batch) return absl::InternalError("the pipeline yielded nothing");
  const stoker::data::Tensor& x = batch->fields.at("x");
  if (x.shape != std::vector<int64_t>{3, 2}) return absl::InternalError("bad batch shape");
  for (int i = 0; i < 3; ++i) {
    if (x.data.data()[2 * i] != 255 - i || x.data.data()[2 * i + 1] != 155 - i) {
      return absl::InternalError("the plugin's op did not run");
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
    return 2;
  }
  absl::Status status = Run(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "stoker_consumer: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
