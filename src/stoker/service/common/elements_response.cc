#include "stoker/service/common/elements_response.h"

namespace stoker::service {
namespace {

// Protobuf wire format: a field's tag is (number << 3) | wire type (0 varint, 2 length-delimited).
constexpr uint8_t kElementsTag = (1 << 3) | 2;     // GetElementsResponse.elements
constexpr uint8_t kEndOfStreamTag = (2 << 3) | 0;  // GetElementsResponse.end_of_stream
constexpr uint8_t kStreamEndTag = (3 << 3) | 0;    // GetElementsResponse.stream_end
constexpr uint8_t kPayloadTag = (6 << 3) | 2;      // ElementData.payload

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Pieces this small are copied into the serialized bytes (a slice of their own costs more).
constexpr size_t kCopyBelow = 4096;

void ReleasePiece(void* holder) { delete static_cast<Buffer*>(holder); }

}  // namespace

void ElementsResponseBuilder::Add(const ElementData& meta, const std::vector<Buffer>& pieces) {
  std::string fields = meta.SerializeAsString();
  size_t payload_size = 0;
  for (const Buffer& b : pieces) payload_size += b.size();
  size_t length = fields.size();
  if (payload_size > 0) length += 1 + VarintSize(payload_size) + payload_size;
  pending_.push_back(static_cast<char>(kElementsTag));
  PutVarint(&pending_, length);
  pending_ += fields;
  if (payload_size == 0) return;
  pending_.push_back(static_cast<char>(kPayloadTag));
  PutVarint(&pending_, payload_size);
  for (const Buffer& b : pieces) {
    if (b.size() < kCopyBelow) {
      pending_.append(b.view());
      continue;
    }
    Flush();
    auto* holder = new Buffer(b);
    slices_.emplace_back(const_cast<uint8_t*>(b.data()), b.size(), &ReleasePiece, holder);
  }
}

void ElementsResponseBuilder::AddFields(const GetElementsResponse& fields) {
  pending_ += fields.SerializeAsString();  // a message's fields may come in any order, repeated
}

grpc::ByteBuffer ElementsResponseBuilder::Finish(bool end_of_stream, int64_t stream_end) {
  if (end_of_stream) {
    pending_.push_back(static_cast<char>(kEndOfStreamTag));
    pending_.push_back(1);
  }
  if (stream_end != 0) {
    pending_.push_back(static_cast<char>(kStreamEndTag));
    PutVarint(&pending_, static_cast<uint64_t>(stream_end));  // negative: 10-byte varint
  }
  Flush();
  grpc::ByteBuffer out(slices_.data(), slices_.size());
  slices_.clear();
  return out;
}

bool ParseElementsResponse(const grpc::ByteBuffer& buffer, GetElementsResponse* out) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out->ParseFromString(bytes);
}

void ElementsResponseBuilder::Flush() {
  if (pending_.empty()) return;
  slices_.emplace_back(pending_);  // copies the small bytes
  pending_.clear();
}

}  // namespace stoker::service
