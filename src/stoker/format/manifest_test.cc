#include "stoker/format/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stoker::format {
namespace {

using ::testing::HasSubstr;

TEST(ManifestTest, RoundTrips) {
  Manifest m;
  m.shards = {{"shard-00000.stk", 10, 1000}, {"shard-00001.stk", 5, 600}};
  m.fields = {"cls", "jpg"};
  m.total_samples = 15;
  m.total_bytes = 1600;
  m.classes = {"ant", "bee", "cat"};
  auto parsed = ParseManifest(SerializeManifest(m), "mem://b/manifest.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, m);
}

TEST(ManifestTest, RejectsWhatItCannotTrust) {
  auto check = [](std::string json, std::string_view expected) {
    auto parsed = ParseManifest(json, "/d/manifest.json");
    ASSERT_FALSE(parsed.ok()) << json;
    EXPECT_THAT(parsed.status().message(), HasSubstr(expected)) << json;
    EXPECT_THAT(parsed.status().message(), HasSubstr("/d/manifest.json"));
  };
  check("{", "not valid JSON");
  check("[]", "not a JSON object");
  check(R"({"format":"other"})", "'format'");
  check(R"({"format":"stoker-dataset","version":2})", "version 2");
  check(R"({"format":"stoker-dataset","version":1,"shards":[{"name":"a","samples":-1,"bytes":3}],
           "fields":[],"total_samples":0,"total_bytes":3})",
        "shards[0].samples");
  check(R"({"format":"stoker-dataset","version":1,"shards":[{"name":"../a","samples":1,"bytes":3}],
           "fields":[],"total_samples":1,"total_bytes":3})",
        "shards[0].name");
  check(R"({"format":"stoker-dataset","version":1,"shards":[{"name":"a","samples":1,"bytes":3}],
           "fields":[],"total_samples":2,"total_bytes":3})",
        "disagree");
  check(R"({"format":"stoker-dataset","version":1,"shards":[],"fields":[],"classes":["a","a"],
           "total_samples":0,"total_bytes":0})",
        "classes[1] ('a') is repeated");
  check(R"({"format":"stoker-dataset","version":1,"shards":[],"fields":[],"classes":[3],
           "total_samples":0,"total_bytes":0})",
        "classes[0] must be a non-empty string");
}

TEST(ManifestTest, ClassesAreOptional) {
  auto parsed = ParseManifest(R"({"format":"stoker-dataset","version":1,"shards":[],"fields":[],
                                  "total_samples":0,"total_bytes":0})",
                              "/d/manifest.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->classes.empty());
  EXPECT_EQ(SerializeManifest(*parsed).find("classes"), std::string::npos);
}

}  // namespace
}  // namespace stoker::format
