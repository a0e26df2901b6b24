#include "stoker/data/source.h"

#include <map>

#include "absl/synchronization/mutex.h"
#include "stoker/core/strings.h"

namespace stoker::data {
namespace {

// The default StartRead: nothing in flight; Read() runs in Wait().
class DeferredRead : public PendingRead {
 public:
  DeferredRead(const IndexedSource& source, std::vector<int64_t> indices)
      : source_(source), indices_(std::move(indices)) {}
  absl::StatusOr<std::vector<Element>> Wait() override { return source_.Read(indices_); }
  bool waited_for_io() const override { return false; }

 private:
  const IndexedSource& source_;
  std::vector<int64_t> indices_;
};

class RangeSource : public IndexedSource {
 public:
  explicit RangeSource(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  absl::StatusOr<std::vector<Element>> Read(std::span<const int64_t> indices) const override {
    std::vector<Element> out;
    out.reserve(indices.size());
    for (int64_t i : indices) {
      Element e;
      e.fields["value"] = Tensor::Scalar(i);
      e.keys.push_back(std::to_string(i));
      e.sample_index = static_cast<uint64_t>(i);
      out.push_back(std::move(e));
    }
    return out;
  }

 private:
  int64_t n_;
};

class VectorSource : public IndexedSource {
 public:
  explicit VectorSource(std::shared_ptr<const std::vector<Element>> samples)
      : samples_(std::move(samples)) {}
  int64_t size() const override { return static_cast<int64_t>(samples_->size()); }
  absl::StatusOr<std::vector<Element>> Read(std::span<const int64_t> indices) const override {
    std::vector<Element> out;
    out.reserve(indices.size());
    for (int64_t i : indices) {
      if (i < 0 || i >= size()) {
        return absl::OutOfRangeError(StrCat("sample index ", i, " out of range [0, ", size(), ")"));
      }
      Element e = (*samples_)[i];
      e.sample_index = static_cast<uint64_t>(i);
      out.push_back(std::move(e));
    }
    return out;
  }
  std::shared_ptr<const std::vector<Element>> samples() const { return samples_; }

 private:
  std::shared_ptr<const std::vector<Element>> samples_;
};

class VectorStream : public ElementStream {
 public:
  VectorStream(std::shared_ptr<const std::vector<Element>> samples, size_t begin, size_t end)
      : samples_(std::move(samples)), pos_(begin), end_(end) {}
  absl::StatusOr<std::optional<Element>> Next() override {
    if (pos_ >= end_) return std::nullopt;
    return (*samples_)[pos_++];
  }

 private:
  std::shared_ptr<const std::vector<Element>> samples_;
  size_t pos_, end_;
};

class VectorStreamSource : public StreamSource {
 public:
  VectorStreamSource(std::shared_ptr<const std::vector<Element>> samples, int shards)
      : samples_(std::move(samples)), shards_(shards) {}
  int num_shards() const override { return shards_; }
  absl::StatusOr<std::unique_ptr<ElementStream>> OpenShard(int shard) const override {
    size_t n = samples_->size();
    size_t begin = n * shard / shards_, end = n * (shard + 1) / shards_;
    return std::unique_ptr<ElementStream>(new VectorStream(samples_, begin, end));
  }

 private:
  std::shared_ptr<const std::vector<Element>> samples_;
  int shards_;
};

absl::Mutex registry_mu(absl::kConstInit);
std::map<std::string, std::shared_ptr<const std::vector<Element>>>& Registry() {
  static auto* registry = new std::map<std::string, std::shared_ptr<const std::vector<Element>>>;
  return *registry;
}

}  // namespace

std::unique_ptr<PendingRead> IndexedSource::StartRead(std::vector<int64_t> indices,
                                                      ThreadPool* /*pool*/) const {
  return std::make_unique<DeferredRead>(*this, std::move(indices));
}

std::shared_ptr<IndexedSource> MakeRangeSource(int64_t n) {
  return std::make_shared<RangeSource>(n);
}

void RegisterMemoryDataset(const std::string& name, std::vector<Element> samples) {
  absl::MutexLock lock(&registry_mu);
  Registry()[name] = std::make_shared<const std::vector<Element>>(std::move(samples));
}

std::shared_ptr<IndexedSource> FindMemoryDataset(const std::string& name) {
  absl::MutexLock lock(&registry_mu);
  auto it = Registry().find(name);
  if (it == Registry().end()) return nullptr;
  return std::make_shared<VectorSource>(it->second);
}

std::shared_ptr<StreamSource> MakeMemoryStreamSource(const std::string& name, int num_shards) {
  absl::MutexLock lock(&registry_mu);
  auto it = Registry().find(name);
  if (it == Registry().end() || num_shards < 1) return nullptr;
  return std::make_shared<VectorStreamSource>(it->second, num_shards);
}

}  // namespace stoker::data
