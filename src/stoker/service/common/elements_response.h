// Builds a serialized GetElementsResponse (service.proto) without copying element payloads: the
// small fields are serialized normally, and each large piece of a payload (a tensor's bytes, see
// element_codec.h) is referenced by the resulting grpc::ByteBuffer as a slice of its own, holding
// a reference to the Buffer until gRPC has sent it. The
// bytes are exactly what protobuf would produce for the same message with the payload's field
// written last (protobuf accepts fields in any order), so the generated client stub parses it.
//
// Thread safety: a builder is used by one thread; the payloads must not change once added.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <string>
#include <vector>

#include "stoker/core/buffer.h"
#include "stoker/service.pb.h"

namespace stoker::service {

class ElementsResponseBuilder {
 public:
  // `meta` is the element without its payload; the payload is the concatenation of `pieces`
  // (none: no payload).
  void Add(const ElementData& meta, const std::vector<Buffer>& pieces);
  // Adds the fields set in `fields` (not its elements, which must be empty): merged by the parser.
  void AddFields(const GetElementsResponse& fields);
  // The message with the elements added so far plus these fields. The builder is empty afterwards.
  grpc::ByteBuffer Finish(bool end_of_stream, int64_t stream_end);

 private:
  void Flush();  // moves pending_ into a slice of its own

  std::vector<grpc::Slice> slices_;
  std::string pending_;  // small serialized bytes not yet in a slice
};

// Parses a serialized GetElementsResponse (what the generated client stub does; for tests and
// tools that call Worker::GetElements directly). False if the bytes are not one.
bool ParseElementsResponse(const grpc::ByteBuffer& buffer, GetElementsResponse* out);

}  // namespace stoker::service
