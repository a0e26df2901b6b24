#include "stoker/testing/s3_server.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "stoker/testing/fault_proxy.h"
#include "stoker/testing/process_util.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {
namespace {

class S3TestServerTest : public S3ServerTest {};

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

TEST_F(S3TestServerTest, PutAndGetThroughTheAwsCli) {
  // SetUp exported the AWS_* variables.
  EXPECT_EQ(std::string(std::getenv("AWS_ENDPOINT_URL")), s3().endpoint());
  EXPECT_EQ(std::string(std::getenv("AWS_ACCESS_KEY_ID")), "test:tester");
  EXPECT_EQ(std::string(std::getenv("AWS_SECRET_ACCESS_KEY")), "testing");
  EXPECT_EQ(std::string(std::getenv("AWS_REGION")), "us-east-1");
  EXPECT_EQ(s3().host(), "127.0.0.1");
  EXPECT_GT(s3().port(), 0);

  ASSERT_TRUE(s3().CreateBucket("put-get").ok());
  absl::StatusOr<std::string> dir = MakeTempDir("stoker-s3-test");
  ASSERT_TRUE(dir.ok()) << dir.status();
  // 20 MiB: above the CLI's 8 MiB threshold, so it goes up as a multipart upload (needs slo).
  const std::string contents = RandomBytes(20 << 20, 1);
  const std::string up = *dir + "/up.bin", down = *dir + "/down.bin";
  std::ofstream(up, std::ios::binary) << contents;

  absl::StatusOr<std::string> put =
      s3().RunAwsCli({"s3", "cp", "--only-show-errors", up, "s3://put-get/dir/object.bin"});
  ASSERT_TRUE(put.ok()) << put.status();
  absl::StatusOr<std::string> get =
      s3().RunAwsCli({"s3", "cp", "--only-show-errors", "s3://put-get/dir/object.bin", down});
  ASSERT_TRUE(get.ok()) << get.status();
  std::ifstream in(down, std::ios::binary);
  std::string read_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(read_back == contents) << "read back " << read_back.size() << " bytes";

  absl::StatusOr<std::string> head =
      s3().RunAwsCli({"s3api", "head-object", "--bucket", "put-get", "--key", "dir/object.bin"});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_NE(head->find("\"ContentLength\": 20971520"), std::string::npos) << *head;
  std::filesystem::remove_all(*dir);
}

TEST_F(S3TestServerTest, RequestSignedWithAWrongSecretIsRefused) {
  ASSERT_TRUE(s3().CreateBucket("signed").ok());
  absl::StatusOr<CommandResult> result =
      RunCommand({"/usr/bin/aws", "--debug", "--endpoint-url", s3().endpoint(), "s3api",
                  "list-objects-v2", "--bucket", "signed"},
                 {{"AWS_ACCESS_KEY_ID", s3().access_key_id()},
                  {"AWS_SECRET_ACCESS_KEY", "not-the-secret"},
                  {"AWS_REGION", s3().region()},
                  {"AWS_SESSION_TOKEN", std::nullopt},
                  {"AWS_PROFILE", std::nullopt},
                  {"AWS_CONFIG_FILE", "/dev/null"},
                  {"AWS_SHARED_CREDENTIALS_FILE", "/dev/null"},
                  {"AWS_CA_BUNDLE", ""}});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_NE(result->exit_code, 0);
  EXPECT_NE(result->output.find("HTTP/1.1\" 403"), std::string::npos) << result->output;
  EXPECT_NE(result->output.find("SignatureDoesNotMatch"), std::string::npos) << result->output;

  // The same request with the right secret succeeds.
  EXPECT_TRUE(s3().RunAwsCli({"s3api", "list-objects-v2", "--bucket", "signed"}).ok());
}

// The fault proxy in front of Swift: signed requests pass through it unchanged (the Host header
// is kept), and the AWS CLI retries the injected 503 and 500.
TEST_F(S3TestServerTest, FaultProxyInFrontOfSwift) {
  ASSERT_TRUE(s3().CreateBucket("through-proxy").ok());
  absl::StatusOr<std::unique_ptr<FaultProxy>> proxy =
      FaultProxy::Start({.upstream_port = s3().port()});
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  (*proxy)->AddRule({.method = "PUT", .count = 1, .fault = FaultKind::kSlowDown503});
  (*proxy)->AddRule({.method = "GET",
                     .path_substring = "/through-proxy/object",
                     .count = 1,
                     .fault = FaultKind::kInternalError500});

  absl::StatusOr<std::string> dir = MakeTempDir("stoker-s3-test");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string contents = RandomBytes(3 << 20, 2);
  const std::string up = *dir + "/up.bin", down = *dir + "/down.bin";
  std::ofstream(up, std::ios::binary) << contents;
  absl::StatusOr<std::string> put = s3().RunAwsCli(
      {"s3", "cp", "--only-show-errors", up, "s3://through-proxy/object"}, (*proxy)->endpoint());
  ASSERT_TRUE(put.ok()) << put.status();
  absl::StatusOr<std::string> get = s3().RunAwsCli(
      {"s3", "cp", "--only-show-errors", "s3://through-proxy/object", down}, (*proxy)->endpoint());
  ASSERT_TRUE(get.ok()) << get.status();
  std::ifstream in(down, std::ios::binary);
  std::string read_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(read_back == contents) << "read back " << read_back.size() << " bytes";
  EXPECT_EQ((*proxy)->faults_injected(FaultKind::kSlowDown503), 1);
  EXPECT_EQ((*proxy)->faults_injected(FaultKind::kInternalError500), 1);
  EXPECT_GE((*proxy)->requests_seen(), 4);
  std::filesystem::remove_all(*dir);
}

TEST(S3TestServerLifecycleTest, StopLeavesNothingRunning) {
  absl::StatusOr<std::unique_ptr<S3TestServer>> server = S3TestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  // memcached, account, container, object, proxy (+ its workers), the owner watcher (+ tail).
  ExpectStopLeavesNothingRunning(**server, 6);
}

}  // namespace
}  // namespace stoker::testing
