#include "stoker/io/read/ranged_reader.h"

#include <future>

#include "absl/synchronization/mutex.h"
#include "stoker/core/status.h"

namespace stoker::io {

// First, simple implementation: one store request per range, all issued at once.
class RangedReader::Impl {
 public:
  Impl(std::shared_ptr<ObjectStore> store, ReaderOptions options)
      : store_(std::move(store)), options_(options) {}

  std::shared_ptr<ObjectStore> store_;
  ReaderOptions options_;
};

namespace {
struct SimpleCall {
  absl::Mutex mu;
  std::vector<Buffer> results ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);
  size_t remaining ABSL_GUARDED_BY(mu) = 0;
  absl::AnyInvocable<void(absl::StatusOr<std::vector<Buffer>>) &&> done;
};
}  // namespace

RangedReader::RangedReader(std::shared_ptr<ObjectStore> store, ReaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(store), options)) {}

RangedReader::~RangedReader() = default;

ObjectStore& RangedReader::store() { return *impl_->store_; }
const ReaderOptions& RangedReader::options() const { return impl_->options_; }

void RangedReader::ReadRangesAsync(
    std::string key, std::vector<ByteRange> ranges, std::string if_match,
    absl::AnyInvocable<void(absl::StatusOr<std::vector<Buffer>>) &&> done) {
  if (ranges.empty()) {
    std::move(done)(std::vector<Buffer>{});
    return;
  }
  auto call = std::make_shared<SimpleCall>();
  {
    absl::MutexLock lock(&call->mu);
    call->results.resize(ranges.size());
    call->remaining = ranges.size();
  }
  call->done = std::move(done);
  for (size_t i = 0; i < ranges.size(); ++i) {
    impl_->store_->ReadAsync(
        ReadRequest{key, ranges[i], if_match}, [call, i](absl::StatusOr<Buffer> result) {
          bool last;
          {
            absl::MutexLock lock(&call->mu);
            if (result.ok()) {
              call->results[i] = *std::move(result);
            } else if (call->status.ok()) {
              call->status = result.status();
            }
            last = --call->remaining == 0;
          }
          if (!last) return;
          absl::StatusOr<std::vector<Buffer>> out;
          {
            absl::MutexLock lock(&call->mu);
            if (call->status.ok()) {
              out = std::move(call->results);
            } else {
              out = call->status;
            }
          }
          std::move(call->done)(std::move(out));
        });
  }
}

absl::StatusOr<std::vector<Buffer>> RangedReader::ReadRanges(std::string_view key,
                                                             std::vector<ByteRange> ranges,
                                                             std::string_view if_match) {
  std::promise<absl::StatusOr<std::vector<Buffer>>> promise;
  auto future = promise.get_future();
  ReadRangesAsync(std::string(key), std::move(ranges), std::string(if_match),
                  [&promise](absl::StatusOr<std::vector<Buffer>> result) {
                    promise.set_value(std::move(result));
                  });
  return future.get();
}

absl::StatusOr<Buffer> RangedReader::Read(std::string_view key, ByteRange range) {
  return impl_->store_->Read(key, range);
}

}  // namespace stoker::io
