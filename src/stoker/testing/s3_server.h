// A real S3 server for tests: OpenStack Swift with s3api + tempauth, started through
// scripts/s3-test-server on free 127.0.0.1 ports with its state in a temporary folder. It checks
// SigV4 signatures, so a wrong signer fails the tests that use it. See docs/testing.md.
//
// Typical use (the shared server starts once per test process; a failure to start fails the test
// with the reason, it never skips):
//
//   class MyS3Test : public stoker::testing::S3ServerTest {};
//   TEST_F(MyS3Test, Reads) {
//     ASSERT_TRUE(s3().CreateBucket("my-bucket").ok());
//     auto store = stoker::io::OpenUrl("s3://my-bucket/key");  // reaches the server via AWS_*
//   }
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "stoker/testing/script_server.h"

namespace stoker::testing {

// Thread safety: every method is thread-safe (the accessors are immutable after Start; the rest
// run subprocesses).
class S3TestServer : public ScriptServer {
 public:
  // Starts a new server (about 3-6 s) in a fresh temporary folder. The error names what failed and
  // carries the servers' log tails.
  static absl::StatusOr<std::unique_ptr<S3TestServer>> Start();

  // The process-wide server, started on the first call and stopped at exit. Every later call
  // returns the same server, or the same start-up error.
  static absl::StatusOr<S3TestServer*> Shared();

  // The destructor and Stop() (ScriptServer) stop every process the server started and remove
  // its folder, state_dir(): configuration, object data, logs (log/*.log), pid files (run/*.pid).

  // "http://127.0.0.1:PORT": the S3 endpoint (path-style addressing).
  const std::string& endpoint() const { return endpoint_; }
  const std::string& access_key_id() const { return access_key_id_; }  // "test:tester"
  const std::string& secret_access_key() const { return secret_access_key_; }
  const std::string& region() const { return region_; }  // "us-east-1"

  // Creates a bucket (S3 bucket naming rules: 3-63 lower-case letters, digits, '-', '.').
  absl::Status CreateBucket(std::string_view bucket) const;

  // Runs Debian's AWS CLI against this server with its credentials, e.g.
  // RunAwsCli({"s3", "cp", "/tmp/file", "s3://bucket/key"}); returns its output, or an error with
  // the output's tail when it exits non-zero. `endpoint_override` (e.g. a FaultProxy's endpoint)
  // replaces endpoint() when not empty.
  absl::StatusOr<std::string> RunAwsCli(const std::vector<std::string>& args,
                                        std::string_view endpoint_override = "") const;

  // Sets AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION for this
  // process (and unsets AWS_SESSION_TOKEN and AWS_PROFILE), so stoker::io::OpenUrl("s3://...")
  // reaches this server. setenv is not thread-safe: call it before starting threads.
  void ExportEnvironment() const;

 private:
  S3TestServer() : ScriptServer("s3-test-server", "the S3 test server (Swift)") {}

  std::string endpoint_;
  std::string access_key_id_;
  std::string secret_access_key_;
  std::string region_;
  bool stopped_ = false;  // only touched by Stop(), which is not called concurrently with itself
};

// GoogleTest fixture: SetUp() gets the shared server (failing the test with the reason if it
// cannot start) and exports its AWS_* environment.
class S3ServerTest : public ::testing::Test {
 protected:
  void SetUp() override;
  S3TestServer& s3() { return *server_; }

 private:
  S3TestServer* server_ = nullptr;
};

}  // namespace stoker::testing
