#include "stoker/testing/http_server.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "stoker/testing/process_util.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {
namespace {

TEST(HttpTestServerTest, ServesFilesRangesAndListings) {
  absl::StatusOr<HttpTestServer*> server = HttpTestServer::Shared();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WriteFile("dir/hello.txt", "hello, world").ok());

  absl::StatusOr<std::string> whole =
      RunCommandOk({"curl", "-sS", "--fail", (*server)->url() + "dir/hello.txt"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, "hello, world");

  absl::StatusOr<std::string> range =
      RunCommandOk({"curl", "-sS", "--fail", "-r", "7-11", (*server)->url() + "dir/hello.txt"});
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(*range, "world");

  absl::StatusOr<std::string> listing =
      RunCommandOk({"curl", "-sS", "--fail", (*server)->url() + "dir/"});
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_NE(listing->find("\"name\":\"hello.txt\""), std::string::npos) << *listing;
}

TEST(HttpTestServerTest, StopLeavesNothingRunning) {
  absl::StatusOr<std::unique_ptr<HttpTestServer>> server = HttpTestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  // nginx master + 2 workers, the owner watcher (+ its tail).
  ExpectStopLeavesNothingRunning(**server, 3);
}

}  // namespace
}  // namespace stoker::testing
