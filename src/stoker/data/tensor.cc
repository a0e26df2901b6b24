#include "stoker/data/tensor.h"

#include <sys/mman.h>

#include <charconv>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "stoker/core/strings.h"

namespace stoker::data {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Large anonymous mappings whose last user let go, kept for reuse by the next UninitBuffer of the
// same (huge-page-rounded) length. Thread-safe; never destroyed, as buffers may be freed at exit.
class MappingPool {
 public:
  static MappingPool& Get() {
    static MappingPool* pool = new MappingPool;
    return *pool;
  }

  // A kept mapping of exactly `length` bytes, or null.
  void* Take(size_t length) {
    absl::MutexLock lock(&mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second != length) continue;
      void* p = it->first;
      free_.erase(it);
      kept_bytes_ -= length;
      return p;
    }
    return nullptr;
  }

  // Keeps the mapping, unmapping the oldest kept ones beyond the byte limit.
  void Give(void* p, size_t length) {
    std::vector<std::pair<void*, size_t>> unmap;
    {
      absl::MutexLock lock(&mu_);
      free_.emplace_back(p, length);
      kept_bytes_ += length;
      while (kept_bytes_ > kMaxKeptBytes) {
        unmap.push_back(free_.front());
        kept_bytes_ -= free_.front().second;
        free_.pop_front();
      }
    }
    for (auto [q, n] : unmap) munmap(q, n);
  }

 private:
  static constexpr size_t kMaxKeptBytes = size_t{1} << 30;
  absl::Mutex mu_;
  std::deque<std::pair<void*, size_t>> free_ ABSL_GUARDED_BY(mu_);  // oldest first
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

UninitBuffer::UninitBuffer(size_t size) : size_(size) {
  constexpr size_t kHugeThreshold = 8 << 20;
  if (size >= kHugeThreshold) {
    size_t length = (size + kHugePage - 1) / kHugePage * kHugePage;
    void* p = MappingPool::Get().Take(length);
    if (p == nullptr) {
      p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED) madvise(p, length, MADV_HUGEPAGE);  // best effort
    }
    if (p != MAP_FAILED) {
      owner_ = std::shared_ptr<void>(p, [length](void* q) { MappingPool::Get().Give(q, length); });
      data_ = static_cast<uint8_t*>(p);
      return;
    }
  }
  owner_ = std::shared_ptr<uint8_t[]>(new uint8_t[size > 0 ? size : 1]);
  data_ = static_cast<uint8_t*>(owner_.get());
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return "uint8";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat32:
      return "float32";
    case DType::kBytes:
      return "bytes";
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (DType d : {DType::kUint8, DType::kInt32, DType::kInt64, DType::kFloat32, DType::kBytes}) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return 1;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
      return 4;
    case DType::kBytes:
      return 1;
  }
  return 1;
}

int64_t Tensor::NumValues() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += StrCat(i ? "," : "", shape[i]);
  return s + "]";
}

Tensor Tensor::Scalar(int64_t value) {
  MutableBuffer b(sizeof(value));
  std::memcpy(b.data(), &value, sizeof(value));
  return Tensor{DType::kInt64, {}, std::move(b).Finish()};
}

Tensor Tensor::FromFloats(std::vector<int64_t> shape, const std::vector<float>& values) {
  MutableBuffer b(values.size() * sizeof(float));
  std::memcpy(b.data(), values.data(), b.size());
  return Tensor{DType::kFloat32, std::move(shape), std::move(b).Finish()};
}

size_t Element::ByteSize() const {
  size_t n = 0;
  for (const auto& [name, t] : fields) n += t.data.size();
  return n;
}

absl::StatusOr<const Tensor*> Element::Field(std::string_view name) const {
  auto it = fields.find(std::string(name));
  if (it != fields.end()) return &it->second;
  std::string present;
  for (const auto& [n, t] : fields) present += StrCat(present.empty() ? "" : ", ", n);
  return absl::NotFoundError(StrCat("sample '", FirstKey(), "' has no field '", name,
                                    "' (fields: ", present.empty() ? "none" : present, ")"));
}

absl::StatusOr<int64_t> ScalarAsInt(const Tensor& t) {
  if (t.dtype == DType::kBytes) {
    std::string_view text = t.data.view();
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
      text.remove_suffix(1);
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
      return absl::InvalidArgumentError(
          StrCat("expected decimal integer text, got '", text.substr(0, 32), "'"));
    }
    return v;
  }
  if (t.NumValues() != 1 || t.data.size() < DTypeSize(t.dtype)) {
    return absl::InvalidArgumentError(StrCat("expected a scalar, got shape ", t.ShapeString()));
  }
  switch (t.dtype) {
    case DType::kUint8:
      return t.values<uint8_t>()[0];
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, t.data.data(), 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, t.data.data(), 8);
      return v;
    }
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, t.data.data(), 4);
      return static_cast<int64_t>(v);
    }
    default:
      break;
  }
  return absl::InvalidArgumentError("not a number");
}

}  // namespace stoker::data
