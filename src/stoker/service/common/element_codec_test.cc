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
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(d->fields.at("raw").data.data()), 5),
            "hello");
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

// The encoding cut at every pair of places decodes as the whole; bytes that lie in one piece are
// slices of it (no copy); a numeric tensor whose piece is not 8-byte aligned is copied to be.
TEST(ElementCodec, PiecesDecodeAsTheWholeEncoding) {
  data::Element e;
  e.keys = {"k/1"};
  e.sample_index = 9;
  e.fields["img"] = data::Tensor::FromFloats({3}, {1, 2, 3});
  e.fields["raw"] = data::Tensor::Bytes(Buffer::Copy("some raw bytes"));
  std::string wire;
  EncodeElement(e, &wire);
  const Buffer whole = Buffer::Copy(wire);
  for (size_t a = 0; a <= wire.size(); ++a) {
    for (size_t b = a; b <= wire.size(); b += 3) {
      auto d = DecodeElement(std::vector<Buffer>{whole.Slice(0, a), whole.Slice(a, b - a),
                                                 whole.Slice(b, wire.size() - b)});
      ASSERT_TRUE(d.ok()) << a << " " << b << ": " << d.status();
      EXPECT_EQ(d->keys, e.keys);
      EXPECT_EQ(d->fields.at("img").values<float>()[2], 3.0f);
      EXPECT_EQ(d->fields.at("raw").data.view(), "some raw bytes");
      EXPECT_EQ(reinterpret_cast<uintptr_t>(d->fields.at("img").data.data()) % 8, 0u);
    }
  }
  // The raw bytes as a piece of their own, 1 byte past an 8-byte boundary (as a range of a file):
  // a slice of that piece. The floats the same way: copied to an aligned buffer.
  EncodedElement pieces = EncodeElementPieces(e, Compression::kNone);
  std::vector<Buffer> moved;
  const uint8_t* raw_at = nullptr;
  for (const Buffer& p : pieces.pieces) {
    Buffer b = Buffer::FromString("x" + p.ToString()).Slice(1, p.size());
    if (p.view() == "some raw bytes") raw_at = b.data();
    moved.push_back(b);
  }
  auto d = DecodeElement(moved);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->fields.at("raw").data.view(), "some raw bytes");
  EXPECT_EQ(d->fields.at("raw").data.data(), raw_at);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d->fields.at("img").data.data()) % 8, 0u);
  EXPECT_EQ(d->fields.at("img").values<float>()[1], 2.0f);
  // Cut short anywhere: an error, as for the whole.
  for (size_t n = 0; n < wire.size(); ++n)
    EXPECT_FALSE(
        DecodeElement(std::vector<Buffer>{whole.Slice(0, n / 2), whole.Slice(n / 2, n - n / 2)})
            .ok())
        << n;
}

TEST(ElementCodec, CompressedPayloadsRoundTrip) {
  data::Element e;
  e.keys = {"k"};
  std::vector<float> values(4096, 0.5f);
  values[7] = 3.0f;
  e.fields["x"] = data::Tensor::FromFloats({64, 64}, values);
  for (Compression c : {Compression::kZstd, Compression::kLz4}) {
    std::string wire = EncodeElement(e, c);
    EXPECT_LT(wire.size(), 4096u) << ModeName(c);  // very repetitive: it must shrink
    auto d = DecodeElement(wire);
    ASSERT_TRUE(d.ok()) << ModeName(c) << ": " << d.status();
    EXPECT_EQ(d->keys, e.keys);
    EXPECT_EQ(d->fields.at("x").values<float>()[7], 3.0f);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d->fields.at("x").data.data()) % 8, 0u);
    // Truncated or corrupted compressed payloads are errors, never crashes.
    for (size_t n = 0; n < wire.size(); n += 7) EXPECT_FALSE(DecodeElement(wire.substr(0, n)).ok());
    std::string bad = wire;
    bad[4] = 9;  // unknown algorithm
    EXPECT_FALSE(DecodeElement(bad).ok());
    bad = wire;
    bad[12] = 0x7f;  // absurd decompressed length
    EXPECT_FALSE(DecodeElement(bad).ok());
  }
  EXPECT_EQ(EncodeElement(e, Compression::kNone).substr(0, 4), "STKE");
}

TEST(ElementCodec, ParsesCompressionNames) {
  EXPECT_EQ(*ParseMode<Compression>("none"), Compression::kNone);
  EXPECT_EQ(*ParseMode<Compression>("zstd"), Compression::kZstd);
  EXPECT_EQ(*ParseMode<Compression>("lz4"), Compression::kLz4);
  for (Compression c : {Compression::kNone, Compression::kZstd, Compression::kLz4})
    EXPECT_EQ(*ParseMode<Compression>(ModeName(c)), c);
  auto bad = ParseMode<Compression>("gzip");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown compression 'gzip': use 'none', 'zstd' or 'lz4'");
}

}  // namespace
}  // namespace stoker::service
