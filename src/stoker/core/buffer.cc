#include "stoker/core/buffer.h"

#include <algorithm>
#include <cstring>

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
    : storage_(std::make_shared<std::vector<uint8_t>>()) {
  // Uninitialised would be cheaper, but vector value-initialises; a later change can use a raw
  // allocation if this shows up in profiles.
  storage_->resize(size);
}

Buffer MutableBuffer::Finish() && {
  auto storage = std::move(storage_);
  const uint8_t* data = storage->data();
  size_t size = storage->size();
  return Buffer::Wrap(std::shared_ptr<const void>(std::move(storage)), data, size);
}

}  // namespace stoker
