#include "stoker/data/tensor.h"

#include <gtest/gtest.h>

namespace stoker::data {
namespace {

TEST(Tensor, ScalarAndShape) {
  Tensor t = Tensor::Scalar(42);
  EXPECT_EQ(t.dtype, DType::kInt64);
  EXPECT_EQ(t.NumValues(), 1);
  EXPECT_EQ(t.ShapeString(), "[]");
  EXPECT_EQ(*ScalarAsInt(t), 42);
  Tensor f = Tensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(f.ShapeString(), "[2,3]");
  EXPECT_EQ(f.data.size(), 24u);
}

TEST(Tensor, ScalarAsIntParsesText) {
  EXPECT_EQ(*ScalarAsInt(Tensor::Bytes(Buffer::Copy("17\n"))), 17);
  EXPECT_FALSE(ScalarAsInt(Tensor::Bytes(Buffer::Copy("x1"))).ok());
  EXPECT_FALSE(ScalarAsInt(Tensor::Bytes(Buffer::Copy(""))).ok());
}

TEST(Tensor, DTypeNames) {
  for (DType d : {DType::kUint8, DType::kInt32, DType::kInt64, DType::kFloat32, DType::kBytes}) {
    EXPECT_EQ(DTypeFromName(DTypeName(d)), d);
  }
  EXPECT_FALSE(DTypeFromName("float64").has_value());
}

TEST(Element, MissingFieldNamesKeyAndFields) {
  Element e;
  e.keys = {"cat/1"};
  e.fields["jpg"] = Tensor::Bytes(Buffer::Copy("x"));
  auto s = e.Field("png").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("cat/1"), std::string::npos);
  EXPECT_NE(s.message().find("jpg"), std::string::npos);
}

TEST(UninitBuffer, LargeMappingsAreReusedOnceReleased) {
  const size_t size = (size_t{16} << 20) + 123;  // a batch-sized buffer
  UninitBuffer first(size);
  uint8_t* p = first.data();
  p[0] = 1;
  p[size - 1] = 2;
  Buffer held = std::move(first).Finish();
  UninitBuffer while_held(size);  // the first is still in use: a different mapping
  EXPECT_NE(while_held.data(), p);
  held = Buffer();  // last user lets go: kept for the next buffer of this size
  UninitBuffer reused(size);
  EXPECT_EQ(reused.data(), p);
  EXPECT_EQ(reused.size(), size);
  UninitBuffer small(1000);  // small buffers come from the heap, never from the pool
  EXPECT_NE(small.data(), nullptr);
}

}  // namespace
}  // namespace stoker::data
