// `stoker cp` / `cat` / `ls` against the Swift S3 server, cross-checked with Debian's AWS CLI.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "stoker/core/strings.h"
#include "stoker/testing/s3_server.h"
#include "stoker/testing/subprocess.h"

namespace stoker {
namespace {

using ::testing::HasSubstr;

std::string Stoker() { return StrCat(STOKER_TEST_BINARY_DIR, "/stoker"); }

void WriteRandomFile(const std::string& path, size_t size, uint32_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<uint64_t> words(size / 8 + 1);
  for (auto& w : words) w = gen();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(words.data()), size);
}

// Runs `command` through the shell (for redirections); fails the test on a non-zero exit.
void Shell(const std::string& command) {
  auto result = testing::RunCommandOk({"bash", "-c", command});
  ASSERT_TRUE(result.ok()) << result.status();
}

class CliS3Test : public testing::S3ServerTest {
 protected:
  void SetUp() override {
    S3ServerTest::SetUp();
    if (HasFatalFailure()) return;
    static bool created = false;
    if (!created) {
      ASSERT_TRUE(s3().CreateBucket("cli").ok());
      created = true;
    }
  }

  testing::ScopedTempDir temp_dir_{"stoker-cli-test"};
  const std::string& dir_ = temp_dir_.path();
};

TEST_F(CliS3Test, CpUpIsReadBackByteExactByTheAwsCli) {
  WriteRandomFile(dir_ + "/up.bin", 100 << 20, 1);
  Shell(StrCat(Stoker(), " cp ", dir_, "/up.bin s3://cli/uploads/"));
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "s3://cli/uploads/up.bin", dir_ + "/down.bin"}).ok());
  Shell(StrCat("cmp ", dir_, "/up.bin ", dir_, "/down.bin"));
}

TEST_F(CliS3Test, AwsCliUploadsAreReadBackByCatWholeAndInRanges) {
  WriteRandomFile(dir_ + "/aws.bin", (20 << 20) + 777, 2);
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", dir_ + "/aws.bin", "s3://cli/aws/aws.bin"}).ok());
  Shell(StrCat(Stoker(), " cat s3://cli/aws/aws.bin | cmp - ", dir_, "/aws.bin"));
  for (auto [offset, length] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 1}, {12345, 100000}, {9 << 20, 9 << 20}, {(20 << 20) + 700, 1000}}) {
    Shell(StrCat(Stoker(), " cat s3://cli/aws/aws.bin --offset ", offset, " --length ", length,
                 " > ", dir_, "/range && tail -c +", offset + 1, " ", dir_, "/aws.bin | head -c ",
                 length, " | cmp - ", dir_, "/range"));
  }
}

TEST_F(CliS3Test, LsListsObjectsAndFolders) {
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "/etc/hostname", "s3://cli/ls/a/one"}).ok());
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "/etc/hostname", "s3://cli/ls/two"}).ok());
  auto out = testing::RunCommandOk({Stoker(), "ls", "s3://cli/ls/"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("s3://cli/ls/a/"));
  EXPECT_THAT(*out, HasSubstr("s3://cli/ls/two"));
  EXPECT_THAT(*out, ::testing::Not(HasSubstr("s3://cli/ls/a/one")));
  auto recursive = testing::RunCommandOk({Stoker(), "ls", "-r", "s3://cli/ls/"});
  EXPECT_THAT(*recursive, HasSubstr("s3://cli/ls/a/one"));
}

TEST_F(CliS3Test, ErrorsNameTheUrlAndExitNonZero) {
  auto missing = testing::RunCommand({Stoker(), "cat", "s3://cli/no/such/object"});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->exit_code, 1);
  EXPECT_THAT(missing->output, HasSubstr("s3://cli/no/such/object"));
  auto bad_secret = testing::RunCommand({Stoker(), "ls", "s3://cli/"},
                                        {{"AWS_SECRET_ACCESS_KEY", "wrong-secret-123"}});
  ASSERT_TRUE(bad_secret.ok());
  EXPECT_EQ(bad_secret->exit_code, 1);
  EXPECT_THAT(bad_secret->output, HasSubstr("test:tester"));
  EXPECT_THAT(bad_secret->output, ::testing::Not(HasSubstr("wrong-secret-123")));
}

}  // namespace
}  // namespace stoker
