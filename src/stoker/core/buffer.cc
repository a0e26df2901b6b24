#include "stoker/core/buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace stoker {

Buffer Buffer::FromString(std::string bytes) {
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  const auto* data = reinterpret_cast<const uint8_t*>(owner->data());
  size_t size = owner->size();
  return Buffer(std::move(owner), data, size);
}

Buffer Buffer::FromVector(std::vector<uint8_t> bytes) {
  auto owner = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  const uint8_t* data = owner->data();
  size_t size = owner->size();
  return Buffer(std::move(owner), data, size);
}

Buffer Buffer::Copy(std::string_view bytes) { return FromString(std::string(bytes)); }

Buffer Buffer::Concat(const std::vector<Buffer>& parts) {
  if (parts.size() == 1) return parts[0];
  size_t total = 0;
  for (const Buffer& p : parts) total += p.size();
  MutableBuffer out(total);
  size_t pos = 0;
  for (const Buffer& p : parts) {
    if (p.size() > 0) std::memcpy(out.data() + pos, p.data(), p.size());
    pos += p.size();
  }
  return std::move(out).Finish();
}

Buffer Buffer::Slice(size_t offset, size_t length) const {
  offset = std::min(offset, size_);
  length = std::min(length, size_ - offset);
  return Buffer(owner_, data_ + offset, length);
}

MutableBuffer::MutableBuffer(size_t size)
    : storage_(new uint8_t[size]),  // default-initialised: no zero-fill
      size_(size) {}

Buffer MutableBuffer::Finish() && {
  std::shared_ptr<const uint8_t[]> owner(storage_.release());
  size_t size = std::exchange(size_, 0);
  const uint8_t* data = owner.get();
  return Buffer::Wrap(std::shared_ptr<const void>(owner, data), data, size);
}

}  // namespace stoker
