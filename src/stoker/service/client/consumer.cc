// The public Consumer (include/stoker/service/consumer.h): a narrow face of ServiceClient.
#include "stoker/service/consumer.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/time/time.h"
#include "stoker/core/status.h"
#include "stoker/service/client/client.h"

namespace stoker::service {

struct Consumer::Impl {
  // Set once by Create.
  int64_t job_id = 0;
  std::string fingerprint;
  // `client` is replaced (by Close) only under `mu`, and read without it only by the consumer's
  // thread (Next, AdvanceEpoch, Checkpoint), which is also the one that closes.
  mutable std::mutex mu;
  std::unique_ptr<ServiceClient> client;
  // What epoch() and stats() say once the client is closed.
  int64_t closed_epoch = 0;
  ConsumerStats closed_stats;
};

namespace {

ConsumerStats ToPublic(const ServiceClientStats& s) {
  ConsumerStats out;
  out.elements = s.elements;
  out.bytes = s.bytes;
  out.duplicates = s.duplicates;
  out.splits = s.splits;
  return out;
}

absl::Status Closed() {
  return absl::FailedPreconditionError("the service consumer was closed (Consumer::Close)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Consumer>> Consumer::Create(const ConsumerOptions& options,
                                                           std::string_view spec_json) {
  if (options.prefetch_bytes <= 0) {
    return absl::InvalidArgumentError("ConsumerOptions::prefetch_bytes must be positive");
  }
  ServiceClientOptions o;
  static_cast<ConsumerOptions&>(o) = options;
  // A request asks for at most what the prefetch budget holds.
  o.request_bytes = std::min(o.request_bytes, o.prefetch_bytes);
  ASSIGN_OR_RETURN(std::unique_ptr<ServiceClient> client,
                   ServiceClient::Open(o, std::string(spec_json)));
  auto impl = std::make_unique<Impl>();
  impl->job_id = client->job_id();
  impl->fingerprint = client->fingerprint();
  impl->client = std::move(client);
  return std::unique_ptr<Consumer>(new Consumer(std::move(impl)));
}

Consumer::Consumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Consumer::~Consumer() { Close(); }

absl::StatusOr<std::optional<data::Element>> Consumer::Next() {
  if (impl_->client == nullptr) return Closed();
  return impl_->client->GetNext();
}

absl::StatusOr<std::optional<data::Element>> Consumer::Next(std::chrono::milliseconds wait) {
  if (impl_->client == nullptr) return Closed();
  return impl_->client->GetNext(absl::FromChrono(wait));
}

bool Consumer::AdvanceEpoch() { return impl_->client != nullptr && impl_->client->AdvanceEpoch(); }

absl::StatusOr<std::string> Consumer::Checkpoint() {
  if (impl_->client == nullptr) return Closed();
  return impl_->client->Checkpoint();
}

void Consumer::Cancel() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->client != nullptr) impl_->client->Cancel();
}

void Consumer::Close() {
  std::unique_ptr<ServiceClient> client;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->client == nullptr) return;
    impl_->closed_epoch = impl_->client->epoch();
    impl_->closed_stats = ToPublic(impl_->client->stats());
    client = std::move(impl_->client);
  }
  client.reset();  // leaves the job and joins its threads, outside the lock (Cancel may wait)
}

int64_t Consumer::epoch() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->client != nullptr ? impl_->client->epoch() : impl_->closed_epoch;
}

int64_t Consumer::job_id() const { return impl_->job_id; }

std::string Consumer::fingerprint() const { return impl_->fingerprint; }

ConsumerStats Consumer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->client != nullptr ? ToPublic(impl_->client->stats()) : impl_->closed_stats;
}

}  // namespace stoker::service
