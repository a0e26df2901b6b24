#include "stoker/service/common/elements_response.h"

#include <gtest/gtest.h>

namespace stoker::service {
namespace {

// Parses the builder's bytes with the generated protobuf code.
GetElementsResponse Parse(const grpc::ByteBuffer& buffer) {
  GetElementsResponse resp;
  EXPECT_TRUE(ParseElementsResponse(buffer, &resp));
  return resp;
}

TEST(ElementsResponseBuilder, ProtobufParsesWhatItBuilds) {
  ElementsResponseBuilder b;
  ElementData meta;
  meta.set_index(7);
  meta.set_split_id(3);
  meta.set_sequence(2);
  std::string big(300000, 'x');  // a multi-byte length varint
  // A payload in pieces: small ones are copied, large ones referenced.
  b.Add(meta, {Buffer::Copy("head"), Buffer::Copy(big), Buffer::Copy("tail")});
  meta.set_index(8);
  meta.set_last(true);
  meta.set_empty(true);
  b.Add(meta, {});
  meta.set_index(9);
  meta.set_empty(false);
  b.Add(meta, {Buffer::Copy("abc")});
  GetElementsResponse resp = Parse(b.Finish(true, 10));
  ASSERT_EQ(resp.elements_size(), 3);
  EXPECT_EQ(resp.elements(0).index(), 7);
  EXPECT_EQ(resp.elements(0).split_id(), 3);
  EXPECT_EQ(resp.elements(0).sequence(), 2);
  EXPECT_EQ(resp.elements(0).payload(), "head" + big + "tail");
  EXPECT_TRUE(resp.elements(1).empty());
  EXPECT_TRUE(resp.elements(1).last());
  EXPECT_TRUE(resp.elements(1).payload().empty());
  EXPECT_EQ(resp.elements(2).payload(), "abc");
  EXPECT_TRUE(resp.end_of_stream());
  EXPECT_EQ(resp.stream_end(), 10);
}

TEST(ElementsResponseBuilder, EmptyAndNegativeFields) {
  ElementsResponseBuilder b;
  GetElementsResponse resp = Parse(b.Finish(false, -1));
  EXPECT_EQ(resp.elements_size(), 0);
  EXPECT_FALSE(resp.end_of_stream());
  EXPECT_EQ(resp.stream_end(), -1);
}

}  // namespace
}  // namespace stoker::service
