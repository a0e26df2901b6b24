#include "stoker/service/client/checkpoint.h"

#include <gtest/gtest.h>

namespace stoker::service {
namespace {

TEST(ServiceCheckpoint, RoundTripAndRemainingPieces) {
  ServiceCheckpoint c;
  c.fingerprint = "f00d";
  c.epoch = 2;
  c.num_samples = 100;
  c.done = {{0, 16}, {32, 48}};
  c.open = {{16, 32, {{0, 2}}}, {60, 70, {{1, 3}}}};
  c.elements = 7;
  c.samples = 44;
  auto parsed = ParseServiceCheckpoint(c.ToJson());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->ToJson(), c.ToJson());
  auto pieces = parsed->Remaining();
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_TRUE(pieces[0].exact);
  EXPECT_EQ(pieces[0].begin, 16);
  EXPECT_EQ(pieces[0].end, 32);
  EXPECT_FALSE(pieces[1].exact);
  EXPECT_EQ(pieces[1].begin, 48);
  EXPECT_EQ(pieces[1].end, 60);
  EXPECT_TRUE(pieces[2].exact);
  EXPECT_EQ(pieces[3].begin, 70);
  EXPECT_EQ(pieces[3].end, 100);
}

TEST(ServiceCheckpoint, ErrorsNameTheField) {
  auto err = [](const std::string& s) { return ParseServiceCheckpoint(s).status().ToString(); };
  EXPECT_NE(err("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"format":"x"})").find("$.format"), std::string::npos);
  const std::string head =
      R"({"format":"stoker-service-checkpoint","version":1,"fingerprint":"f","epoch":0,)"
      R"("num_samples":10,"elements":0,"samples":0,)";
  EXPECT_NE(err(head + R"("done":[[5,3]],"open":[]})").find("$.done[0]"), std::string::npos);
  EXPECT_NE(err(head + R"("done":[[0,12]],"open":[]})").find("$.done[0]"), std::string::npos);
  EXPECT_NE(
      err(head + R"("done":[[0,5]],"open":[{"begin":4,"end":6,"delivered":[]}]})").find("overlap"),
      std::string::npos);
  EXPECT_TRUE(ParseServiceCheckpoint(head + R"("done":[[0,10]],"open":[]})").ok());
  EXPECT_NE(err(R"({"format":"stoker-service-checkpoint","version":2})").find("newer"),
            std::string::npos);
}

TEST(ServiceCheckpoint, SpecDifferenceNamesThePath) {
  using nlohmann::json;
  json then = {
      {"seed", 1},
      {"threads", 2},
      {"source", {{"mix", {{{"range", 5}, {"weight", 0.3}}, {{"range", 6}, {"weight", 0.7}}}}}}};
  json now = then;
  now["threads"] = 8;  // not part of the fingerprint
  EXPECT_EQ(DescribeSpecDifference(then, now), "");
  now["source"]["mix"][1]["weight"] = 0.5;
  EXPECT_EQ(DescribeSpecDifference(then, now),
            "$.source.mix[1].weight is 0.7 in the checkpoint, 0.5 in this spec");
  now = then;
  now["ops"] = json::array({{{"op", "batch"}, {"size", 4}}});
  EXPECT_EQ(DescribeSpecDifference(then, now),
            "$.ops is absent in the checkpoint, [{\"op\":\"batch\",\"size\":4}] in this spec");
  // The spec travels in the token.
  ServiceCheckpoint c;
  c.fingerprint = "f";
  c.num_samples = 3;
  c.spec = then;
  auto parsed = ParseServiceCheckpoint(c.ToJson());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->spec, then);
}

TEST(ServiceCheckpoint, MergeRanges) {
  auto m = MergeRanges({{5, 8}, {0, 2}, {2, 4}, {7, 9}});
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (ServiceCheckpoint::Range{0, 4}));
  EXPECT_EQ(m[1], (ServiceCheckpoint::Range{5, 9}));
}

}  // namespace
}  // namespace stoker::service
