#include "stoker/service/common/element_codec.h"

#include <gtest/gtest.h>

namespace stoker::service {
namespace {

TEST(ElementCodec, RoundTripsKeysShapesAndBytes) {
  data::Element e;
  e.keys = {"a/1", "b/2"};
  e.sample_index = 42;
  e.epoch = 3;
  e.fields["img"] = data::Tensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  e.fields["raw"] = data::Tensor::Bytes(Buffer::Copy("hello"));
  std::string wire;
  EncodeElement(e, &wire);
  auto d = DecodeElement(wire);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->keys, e.keys);
  EXPECT_EQ(d->sample_index, 42u);
  EXPECT_EQ(d->epoch, 3);
  const data::Tensor& img = d->fields.at("img");
  EXPECT_EQ(img.dtype, data::DType::kFloat32);
  EXPECT_EQ(img.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(img.values<float>()[5], 6.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(img.data.data()) % 8, 0u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(d->fields.at("raw").data.data()), 5), "hello");
}

TEST(ElementCodec, TruncatedOrGarbledPayloadIsAnError) {
  data::Element e;
  e.keys = {"k"};
  e.fields["x"] = data::Tensor::FromFloats({4}, {1, 2, 3, 4});
  std::string wire;
  EncodeElement(e, &wire);
  for (size_t n = 0; n < wire.size(); ++n) EXPECT_FALSE(DecodeElement(wire.substr(0, n)).ok()) << n;
  EXPECT_FALSE(DecodeElement("garbage").ok());
}

}  // namespace
}  // namespace stoker::service
