// The snapshot record codec (snapshot.h): an element stored as a record comes back bit for bit,
// and a record that does not agree with its "__tensors__" description is DataLoss naming it.
#include "stoker/data/snapshot.h"

#include <gtest/gtest.h>

#include <cstring>

namespace stoker::data {
namespace {

Element Batch() {
  Element e;
  e.keys = {"a", "b"};
  e.fields["img"] = Tensor{DType::kUint8, {2, 2}, Buffer::FromString("wxyz")};
  std::vector<float> values = {1.5f, -2.0f};
  e.fields["f"] = Tensor::FromFloats({2}, values);
  e.fields["raw"] = Tensor::Bytes(Buffer::FromString("jpeg bytes"));
  return e;
}

std::vector<std::pair<std::string, Buffer>> FieldsOf(const Element& e, const std::string& meta) {
  std::vector<std::pair<std::string, Buffer>> fields;
  for (const auto& [name, t] : e.fields) fields.emplace_back(name, t.data);
  fields.emplace_back(std::string(kSnapshotMetaField), Buffer::FromString(meta));
  return fields;
}

TEST(SnapshotRecord, ElementRoundTripsWithKeysDtypesShapesAndBytes) {
  Element e = Batch();
  auto meta = EncodeSnapshotMeta(e);
  ASSERT_TRUE(meta.ok()) << meta.status();
  auto back = DecodeSnapshotElement(*meta, FieldsOf(e, *meta), "here");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->keys, e.keys);
  ASSERT_EQ(back->fields.size(), e.fields.size());
  for (const auto& [name, t] : e.fields) {
    const Tensor& b = back->fields.at(name);
    EXPECT_EQ(b.dtype, t.dtype) << name;
    EXPECT_EQ(b.shape, t.shape) << name;
    EXPECT_EQ(b.data.view(), t.data.view()) << name;
  }
}

TEST(SnapshotRecord, UnalignedFieldIsCopiedToAnAlignedBuffer) {
  Element e = Batch();
  auto meta = EncodeSnapshotMeta(e);
  ASSERT_TRUE(meta.ok());
  // The float field as a slice at an odd offset of a larger buffer, as a shard read gives it.
  Buffer whole = Buffer::FromString(std::string("x") + e.fields["f"].data.ToString());
  auto fields = FieldsOf(e, *meta);
  for (auto& [name, value] : fields)
    if (name == "f") value = Buffer::Wrap(whole.owner(), whole.data() + 1, whole.size() - 1);
  auto back = DecodeSnapshotElement(*meta, std::move(fields), "here");
  ASSERT_TRUE(back.ok()) << back.status();
  const Tensor& f = back->fields.at("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data.data()) % alignof(float), 0u);
  EXPECT_EQ(f.values<float>()[1], -2.0f);
}

TEST(SnapshotRecord, DisagreementsAreDataLossNamingTheRecordAndField) {
  Element e = Batch();
  auto meta = EncodeSnapshotMeta(e);
  ASSERT_TRUE(meta.ok());
  auto fields = FieldsOf(e, *meta);
  for (auto& [name, value] : fields)
    if (name == "img") value = Buffer::FromString("short");
  auto bad = DecodeSnapshotElement(*meta, fields, "s3://b/snap/part-1.stk key a");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("s3://b/snap/part-1.stk key a"), std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("field img: 5 bytes for uint8 of shape [2,2]"),
            std::string::npos)
      << bad.status();
  // A described field missing from the record, a field not described, a broken description.
  fields.erase(fields.begin());
  EXPECT_EQ(DecodeSnapshotElement(*meta, fields, "r").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSnapshotElement(R"({"keys": ["a"], "tensors": {}})", FieldsOf(e, ""), "r")
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSnapshotElement("{not json", FieldsOf(e, ""), "r").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(SnapshotRecord, ElementsItCannotHoldAreRefused) {
  Element keyless = Batch();
  keyless.keys.clear();
  EXPECT_EQ(EncodeSnapshotMeta(keyless).status().code(), absl::StatusCode::kInvalidArgument);
  Element reserved = Batch();
  reserved.fields[std::string(kSnapshotMetaField)] = Tensor::Bytes(Buffer::FromString("x"));
  EXPECT_EQ(EncodeSnapshotMeta(reserved).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::data
