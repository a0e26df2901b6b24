// A program built outside the stoker tree against an installed stoker that reads a pipeline
// through a running service (a `stoker dispatcher` and `stoker worker` the caller started) with
// the public stoker::service::Consumer. It reads part of the job, takes a checkpoint token,
// closes, resumes from the token in a second Consumer and reads the rest; then checks that every
// sample's key came exactly once, in the order a local run of the same spec gives, with values
// that match the keys. Prints "ok" on success.
//
// usage: stoker_service_consumer DISPATCHER_ADDRESS
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "stoker/core/status.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/consumer.h"

namespace {

constexpr int64_t kSamples = 200;
constexpr int64_t kBatch = 4;
const std::string kSpec = R"({"seed": 7, "source": {"range": 200},
    "ops": [{"op": "shuffle"}, {"op": "batch", "size": 4}]})";

// Appends the keys of `e` to `keys` after checking that its values are its keys.
absl::Status Collect(const stoker::data::Element& e, std::vector<std::string>* keys) {
  ASSIGN_OR_RETURN(const stoker::data::Tensor* value, e.Field("value"));
  if (value->dtype != stoker::data::DType::kInt64 ||
      value->shape != std::vector<int64_t>{static_cast<int64_t>(e.keys.size())}) {
    return absl::InternalError("element " + e.FirstKey() + ": unexpected 'value' tensor");
  }
  const auto* values = reinterpret_cast<const int64_t*>(value->data.data());
  for (size_t i = 0; i < e.keys.size(); ++i) {
    if (e.keys[i] != std::to_string(values[i])) {
      return absl::InternalError("key " + e.keys[i] + " holds value " + std::to_string(values[i]));
    }
    keys->push_back(e.keys[i]);
  }
  return absl::OkStatus();
}

// Reads through the service; stops after `max_elements` (-1: to the end of the job) and returns
// a checkpoint token then (empty at the end of the job).
absl::StatusOr<std::string> Read(const stoker::service::ConsumerOptions& options,
                                 int64_t max_elements, std::vector<std::string>* keys) {
  ASSIGN_OR_RETURN(auto consumer, stoker::service::Consumer::Create(options, kSpec));
  if (consumer->fingerprint().empty()) return absl::InternalError("no fingerprint");
  int64_t elements = 0;
  while (max_elements < 0 || elements < max_elements) {
    ASSIGN_OR_RETURN(std::optional<stoker::data::Element> e,
                     consumer->Next(std::chrono::seconds(60)));
    if (!e) {
      if (consumer->epoch() != 0) return absl::InternalError("the end of an epoch other than 0");
      if (consumer->AdvanceEpoch()) return absl::InternalError("a job of one epoch had another");
      break;
    }
    RETURN_IF_ERROR(Collect(*e, keys));
    ++elements;
  }
  std::string token;
  if (max_elements >= 0) {
    ASSIGN_OR_RETURN(token, consumer->Checkpoint());
  }
  stoker::service::ConsumerStats stats = consumer->stats();
  if (stats.elements != elements) {
    return absl::InternalError("stats().elements is " + std::to_string(stats.elements) +
                               ", Next returned " + std::to_string(elements));
  }
  consumer->Close();
  consumer->Close();  // idempotent
  if (consumer->Next().status().code() != absl::StatusCode::kFailedPrecondition) {
    return absl::InternalError("Next after Close did not fail");
  }
  if (consumer->stats().elements != elements) return absl::InternalError("stats lost by Close");
  return token;
}

absl::Status Run(const std::string& dispatcher) {
  // The order a local run gives.
  std::vector<std::string> expected;
  ASSIGN_OR_RETURN(auto pipeline, stoker::data::Pipeline::FromString(kSpec));
  auto it = pipeline->MakeIterator(/*epoch=*/0);
  while (true) {
    ASSIGN_OR_RETURN(std::optional<stoker::data::Element> e, it->GetNext());
    if (!e) break;
    RETURN_IF_ERROR(Collect(*e, &expected));
  }
  if (static_cast<int64_t>(expected.size()) != kSamples) {
    return absl::InternalError("the local run gave " + std::to_string(expected.size()) + " keys");
  }

  stoker::service::ConsumerOptions options;
  options.dispatcher_address = dispatcher;
  options.connect_timeout = std::chrono::seconds(20);
  std::vector<std::string> keys;
  const int64_t first = kSamples / kBatch / 2 - 3;  // not a split boundary, most likely
  ASSIGN_OR_RETURN(options.resume, Read(options, first, &keys));
  if (static_cast<int64_t>(keys.size()) != first * kBatch) {
    return absl::InternalError("the first consumer read " + std::to_string(keys.size()) + " keys");
  }
  RETURN_IF_ERROR(Read(options, /*max_elements=*/-1, &keys).status());

  std::vector<int> seen(kSamples, 0);
  for (const std::string& k : keys) {
    int64_t i = std::stoll(k);
    if (i < 0 || i >= kSamples) return absl::InternalError("key out of range: " + k);
    ++seen[i];
  }
  for (int64_t i = 0; i < kSamples; ++i) {
    if (seen[i] != 1) {
      return absl::InternalError("key " + std::to_string(i) + " came " + std::to_string(seen[i]) +
                                 " times");
    }
  }
  if (keys != expected) return absl::InternalError("not the order of a local run");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DISPATCHER_ADDRESS\n", argv[0]);
    return 2;
  }
  absl::Status status = Run(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "stoker_service_consumer: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
