#include "stoker/data/params.h"

#include <gtest/gtest.h>

namespace stoker::data {
namespace {

using json = nlohmann::json;

TEST(ParamReader, ReadsTypedValuesAndDefaults) {
  json op = {{"field", "jpg"}, {"size", {224, 200}}, {"p", 0.25}, {"n", 3}};
  ParamReader r(op, "$.ops[2]", "op 'x'");
  EXPECT_EQ(r.String("field"), "jpg");
  EXPECT_EQ(r.Size("size"), std::make_pair(224, 200));
  EXPECT_EQ(r.Number("p", 0.5, 0, 1), 0.25);
  EXPECT_EQ(r.Int("n", std::nullopt, 1), 3);
  EXPECT_EQ(r.String("layout", "HWC", {"HWC", "CHW"}), "HWC");
  EXPECT_TRUE(r.Finish().ok());
}

TEST(ParamReader, WrongTypeNamesPathExpectedAndGot) {
  json op = {{"size", "big"}};
  ParamReader r(op, "$.ops[3]", "op 'resize'");
  r.Size("size");
  auto s = r.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("$.ops[3].size"), std::string::npos) << s;
  EXPECT_NE(s.message().find("expected an integer >= 1 or an array"), std::string::npos) << s;
  EXPECT_NE(s.message().find("big"), std::string::npos) << s;
}

TEST(ParamReader, MissingAndUnknownFields) {
  json op = {{"sise", 3}};
  {
    ParamReader r(op, "$.ops[0]", "op 'batch'");
    r.Int("size", std::nullopt, 1);
    auto s = r.Finish();
    EXPECT_NE(s.message().find("$.ops[0].size: missing required field"), std::string::npos) << s;
  }
  {
    ParamReader r(op, "$.ops[0]", "op 'batch'");
    r.Int("size", 1, 1);
    auto s = r.Finish();
    EXPECT_NE(s.message().find("$.ops[0].sise: unknown field"), std::string::npos) << s;
    EXPECT_NE(s.message().find("\"size\""), std::string::npos) << s;
  }
}

TEST(ParamReader, AllowedValuesListed) {
  json op = {{"layout", "NCHW"}};
  ParamReader r(op, "$.ops[1]", "op 'normalize'");
  r.String("layout", "HWC", {"HWC", "CHW"});
  auto s = r.Finish();
  EXPECT_NE(s.message().find("one of \"HWC\", \"CHW\""), std::string::npos) << s;
}

TEST(ParamReader, RangeChecks) {
  json op = {{"size", 0}, {"p", 1.5}};
  ParamReader r(op, "$.ops[0]", "op");
  r.Int("size", std::nullopt, 1);
  EXPECT_NE(r.Finish().message().find(">= 1"), std::string::npos);
  ParamReader r2(op, "$.ops[0]", "op");
  r2.Number("p", 0.5, 0, 1);
  r2.Raw("size");
  EXPECT_NE(r2.Finish().message().find("$.ops[0].p"), std::string::npos);
}

}  // namespace
}  // namespace stoker::data
