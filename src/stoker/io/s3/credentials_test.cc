#include "stoker/io/s3/credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace stoker::io::s3 {
namespace {

using testing::HasSubstr;
using testing::Not;

// A fake environment: only the variables in the map are set.
GetEnvFunction FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

class CredentialsFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) /
           ("stoker_credentials_test_" + std::to_string(getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_ / ".aws");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& relative, const std::string& text) {
    std::filesystem::path path = dir_ / relative;
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path dir_;
};

TEST(S3ConfigTest, DefaultsToAwsAnonymous) {
  auto config = S3ConfigFromEnvironment(FakeEnv({}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_EQ(config->region, "us-east-1");
  EXPECT_FALSE(config->path_style);
  EXPECT_TRUE(config->credentials.anonymous());
}

TEST(S3ConfigTest, RegionOrder) {
  EXPECT_EQ(S3ConfigFromEnvironment(FakeEnv({{"AWS_DEFAULT_REGION", "eu-west-1"}}))->region,
            "eu-west-1");
  auto both = S3ConfigFromEnvironment(
      FakeEnv({{"AWS_REGION", "ap-south-1"}, {"AWS_DEFAULT_REGION", "eu-west-1"}}));
  EXPECT_EQ(both->region, "ap-south-1");
  EXPECT_EQ(both->endpoint, "https://s3.ap-south-1.amazonaws.com");
  // An empty variable counts as unset.
  EXPECT_EQ(S3ConfigFromEnvironment(FakeEnv({{"AWS_REGION", ""}}))->region, "us-east-1");
}

TEST(S3ConfigTest, CustomEndpointIsPathStyle) {
  auto config = S3ConfigFromEnvironment(FakeEnv({{"AWS_ENDPOINT_URL", "http://127.0.0.1:8080/"},
                                                 {"AWS_ACCESS_KEY_ID", "test:tester"},
                                                 {"AWS_SECRET_ACCESS_KEY", "testing"},
                                                 {"AWS_SESSION_TOKEN", "tok"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->endpoint, "http://127.0.0.1:8080");
  EXPECT_TRUE(config->path_style);
  EXPECT_EQ(config->credentials.access_key_id, "test:tester");
  EXPECT_EQ(config->credentials.secret_access_key, "testing");
  EXPECT_EQ(config->credentials.session_token, "tok");
  // The S3-specific variable wins.
  EXPECT_EQ(S3ConfigFromEnvironment(FakeEnv({{"AWS_ENDPOINT_URL", "http://a:1"},
                                             {"AWS_ENDPOINT_URL_S3", "https://b:2"}}))
                ->endpoint,
            "https://b:2");
}

TEST(S3ConfigTest, BadEndpointIsNamed) {
  for (const char* bad : {"127.0.0.1:8080", "ftp://x", "http://", "http://h?x=1"}) {
    auto config = S3ConfigFromEnvironment(FakeEnv({{"AWS_ENDPOINT_URL", bad}}));
    ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(config.status().message(), HasSubstr("AWS_ENDPOINT_URL")) << bad;
  }
}

TEST(S3ConfigTest, HalfCredentialsIsAnError) {
  auto config = S3ConfigFromEnvironment(FakeEnv({{"AWS_ACCESS_KEY_ID", "AKID"}}));
  ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY is not"));
  config = S3ConfigFromEnvironment(FakeEnv({{"AWS_SECRET_ACCESS_KEY", "sekrit"}}));
  ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), Not(HasSubstr("sekrit")));
}

TEST(CredentialsTest, DebugStringHidesSecrets) {
  Credentials c{"AKIDEXAMPLE", "very-secret", "session-secret"};
  EXPECT_THAT(c.DebugString(), HasSubstr("AKIDEXAMPLE"));
  EXPECT_THAT(c.DebugString(), Not(HasSubstr("very-secret")));
  EXPECT_THAT(c.DebugString(), Not(HasSubstr("session-secret")));
  EXPECT_EQ(Credentials{}.DebugString(), "Credentials{anonymous}");
}

TEST(IniTest, ParsesSectionsCommentsAndWhitespace) {
  auto ini = ParseIni(
      "\xEF\xBB\xBF# comment\n"
      "[default]\r\n"
      "aws_access_key_id = AKID1\n"
      "  AWS_Secret_Access_Key=  secret = with equals  \n"
      "; another comment\n"
      "\n"
      "[profile work]\n"
      "aws_access_key_id=AKID2\n"
      "s3 =\n"
      "  addressing_style = path\n"
      "[empty]\n",
      "creds");
  ASSERT_TRUE(ini.ok()) << ini.status();
  EXPECT_EQ(ini->at("default").at("aws_access_key_id"), "AKID1");
  EXPECT_EQ(ini->at("default").at("aws_secret_access_key"), "secret = with equals");
  EXPECT_EQ(ini->at("profile work").at("s3.addressing_style"), "path");
  EXPECT_TRUE(ini->at("empty").empty());
}

TEST(IniTest, ErrorsNameFileLineAndFixButNotTheLine) {
  struct Case {
    const char* text;
    int line;
    const char* fix;
  };
  for (const Case& c :
       {Case{"key = v\n", 1, "add [default]"}, Case{"[default]\n\n[bad\n", 3, "closing ']'"},
        Case{"[default]\nsecret-without-equals\n", 2, "key = value"},
        Case{"[]\n", 1, "empty section"}, Case{"[default]\n= v\n", 2, "starts with '='"}}) {
    auto ini = ParseIni(c.text, "/home/u/.aws/credentials");
    ASSERT_EQ(ini.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(ini.status().message(),
                HasSubstr("/home/u/.aws/credentials:" + std::to_string(c.line) + ": "));
    EXPECT_THAT(ini.status().message(), HasSubstr(c.fix));
    EXPECT_THAT(ini.status().message(), Not(HasSubstr("secret-without-equals")));
  }
}

TEST(IniTest, ProfileLookup) {
  auto ini = ParseIni(
      "[default]\naws_access_key_id=A\naws_secret_access_key=S\n"
      "[profile dev]\naws_access_key_id=B\naws_secret_access_key=T\naws_session_token=X\n"
      "[broken]\naws_access_key_id=C\n",
      "f");
  ASSERT_TRUE(ini.ok());
  EXPECT_EQ(CredentialsFromProfile(*ini, "default", "f")->access_key_id, "A");
  auto dev = CredentialsFromProfile(*ini, "dev", "f");
  ASSERT_TRUE(dev.ok());
  EXPECT_EQ(dev->secret_access_key, "T");
  EXPECT_EQ(dev->session_token, "X");
  EXPECT_EQ(CredentialsFromProfile(*ini, "nope", "f").status().code(), absl::StatusCode::kNotFound);
  auto broken = CredentialsFromProfile(*ini, "broken", "f");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken.status().message(), HasSubstr("aws_secret_access_key"));
}

TEST_F(CredentialsFileTest, HomeCredentialsDefaultProfile) {
  Write(".aws/credentials",
        "[default]\naws_access_key_id = AKIDHOME\naws_secret_access_key = S1\n");
  auto config = S3ConfigFromEnvironment(FakeEnv({{"HOME", dir_.string()}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->credentials.access_key_id, "AKIDHOME");
  EXPECT_EQ(config->credentials.secret_access_key, "S1");
}

TEST_F(CredentialsFileTest, EnvironmentBeatsFile) {
  Write(".aws/credentials",
        "[default]\naws_access_key_id = AKIDHOME\naws_secret_access_key = S1\n");
  auto config = S3ConfigFromEnvironment(FakeEnv(
      {{"HOME", dir_.string()}, {"AWS_ACCESS_KEY_ID", "ENVID"}, {"AWS_SECRET_ACCESS_KEY", "E"}}));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->credentials.access_key_id, "ENVID");
}

TEST_F(CredentialsFileTest, ExplicitFileAndProfile) {
  std::string path = Write("creds.ini",
                           "[default]\naws_access_key_id=D\naws_secret_access_key=S\n"
                           "[ci]\naws_access_key_id=CI\naws_secret_access_key=S2\n");
  auto config = S3ConfigFromEnvironment(
      FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "ci"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->credentials.access_key_id, "CI");

  auto missing_profile = S3ConfigFromEnvironment(
      FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "nope"}}));
  EXPECT_EQ(missing_profile.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing_profile.status().message(), HasSubstr("[nope]"));
  EXPECT_THAT(missing_profile.status().message(), HasSubstr(path));

  auto missing_file = S3ConfigFromEnvironment(
      FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", (dir_ / "absent").string()}}));
  EXPECT_EQ(missing_file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing_file.status().message(), HasSubstr("AWS_SHARED_CREDENTIALS_FILE"));
}

TEST_F(CredentialsFileTest, NoFileOrNoDefaultProfileIsAnonymous) {
  auto config = S3ConfigFromEnvironment(FakeEnv({{"HOME", dir_.string()}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->credentials.anonymous());

  Write(".aws/credentials", "[other]\naws_access_key_id=O\naws_secret_access_key=S\n");
  config = S3ConfigFromEnvironment(FakeEnv({{"HOME", dir_.string()}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->credentials.anonymous());
}

TEST_F(CredentialsFileTest, ParseErrorNamesFileAndLine) {
  std::string path = Write(".aws/credentials", "[default]\naws_access_key_id\n");
  auto config = S3ConfigFromEnvironment(FakeEnv({{"HOME", dir_.string()}}));
  ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(path + ":2: "));
}

}  // namespace
}  // namespace stoker::io::s3
