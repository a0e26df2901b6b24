// `stoker cp` / `cat` / `ls` against the Swift S3 server, cross-checked with Debian's AWS CLI.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
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

// A folder tree of `files` random files (sizes 0 B to 100 KiB, one of 9 MiB for multipart
// uploads when `large`), in nested folders.
void WriteTree(const std::string& root, int files, bool large) {
  for (int i = 0; i < files; ++i) {
    std::string folder = StrCat(root, "/", i % 3 == 0 ? "" : StrCat("d", i % 4, "/sub ", i % 2));
    std::filesystem::create_directories(folder);
    size_t size = i == 0 ? 0 : (i * 7919) % (100 << 10);
    if (large && i == 1) size = (9 << 20) + 5;
    WriteRandomFile(StrCat(folder, "/file-", i, ".bin"), size, 100 + i);
  }
}

TEST_F(CliS3Test, CpRecursiveAndSyncRoundTripByteExactWithTheAwsCli) {
  WriteTree(dir_ + "/src", 40, /*large=*/true);
  // stoker up, the AWS CLI down.
  Shell(StrCat(Stoker(), " cp --recursive ", dir_, "/src s3://cli/tree/"));
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "--recursive", "s3://cli/tree/", dir_ + "/aws"}).ok());
  Shell(StrCat("diff -r ", dir_, "/src ", dir_, "/aws"));
  // The AWS CLI up, stoker sync down; a second sync copies nothing.
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "--recursive", dir_ + "/src", "s3://cli/awstree/"}).ok());
  // Two seconds later, so that a download stamped with its own time would show another second.
  absl::SleepFor(absl::Seconds(2));
  auto first = testing::RunCommandOk({Stoker(), "sync", "s3://cli/awstree/", dir_ + "/down"});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(*first, HasSubstr("sync: 40 of 40 objects copied"));
  Shell(StrCat("diff -r ", dir_, "/src ", dir_, "/down"));
  // Each downloaded file keeps its object's modification time (as `aws s3 sync` does): both
  // listings show the same times, so a sync in the same second as the upload is still a no-op.
  auto times = [](const std::string& listing) {
    std::map<std::string, std::string> by_name;  // file name -> "date time" column
    const std::vector<std::string> lines = absl::StrSplit(listing, '\n', absl::SkipEmpty());
    for (const std::string& line : lines) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() != 4 || fields[0] == "DIR") continue;
      by_name[std::string(fields[3].substr(fields[3].rfind('/') + 1))] =
          StrCat(fields[1], " ", fields[2]);
    }
    return by_name;
  };
  auto remote = testing::RunCommandOk({Stoker(), "ls", "s3://cli/awstree/"});
  auto local = testing::RunCommandOk({Stoker(), "ls", dir_ + "/down/"});
  ASSERT_TRUE(remote.ok() && local.ok());
  EXPECT_EQ(times(*remote).size(), 14u);
  EXPECT_EQ(times(*local), times(*remote));
  auto again = testing::RunCommandOk({Stoker(), "sync", "s3://cli/awstree/", dir_ + "/down"});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(*again, HasSubstr("0 of 40 objects copied (0 B), 40 up to date"));
  // A changed file (another size) and a new one are copied up by sync, and only they.
  WriteRandomFile(dir_ + "/src/file-3.bin", 4321, 7);
  WriteRandomFile(dir_ + "/src/d1/new.bin", 1234, 8);
  auto up = testing::RunCommandOk({Stoker(), "sync", dir_ + "/src", "s3://cli/tree"});
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_THAT(*up, HasSubstr("2 of 41 objects copied"));
  ASSERT_TRUE(s3().RunAwsCli({"s3", "sync", "s3://cli/tree/", dir_ + "/aws"}).ok());
  Shell(StrCat("diff -r ", dir_, "/src ", dir_, "/aws"));
  // s3 -> s3 by prefix.
  Shell(StrCat(Stoker(), " sync s3://cli/tree/ s3://cli/copy/"));
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "--recursive", "s3://cli/copy/", dir_ + "/copy"}).ok());
  Shell(StrCat("diff -r ", dir_, "/src ", dir_, "/copy"));
}

TEST_F(CliS3Test, AnInterruptedSyncIsCompletedByARerun) {
  WriteTree(dir_ + "/many", 300, /*large=*/false);
  // kill -9 the first sync once some objects have landed.
  Shell(StrCat(Stoker(), " sync --jobs 1 ", dir_,
               "/many s3://cli/many/ & pid=$!; "
               "for i in $(seq 1 400); do "
               "  n=$(",
               Stoker(),
               " ls -r s3://cli/many/ 2>/dev/null | wc -l); "
               "  [ \"$n\" -ge 20 ] && break; sleep 0.02; done; "
               "kill -9 $pid; wait $pid; sleep 1; true"));  // (a PUT in flight may still land)
  auto partial = testing::RunCommandOk({Stoker(), "ls", "-r", "s3://cli/many/"});
  ASSERT_TRUE(partial.ok()) << partial.status();
  const auto landed = std::count(partial->begin(), partial->end(), '\n');
  EXPECT_GE(landed, 20);
  EXPECT_LT(landed, 300) << "the first sync was not interrupted";
  auto rerun = testing::RunCommandOk({Stoker(), "sync", dir_ + "/many", "s3://cli/many/"});
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_THAT(*rerun, HasSubstr(StrCat(300 - landed, " of 300 objects copied")));
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "--recursive", "s3://cli/many/", dir_ + "/back"}).ok());
  Shell(StrCat("diff -r ", dir_, "/many ", dir_, "/back"));
}

TEST_F(CliS3Test, LsOfS3ListsTheBuckets) {
  ASSERT_TRUE(s3().CreateBucket("cli-second").ok());
  auto out = testing::RunCommandOk({Stoker(), "ls", "s3://"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("s3://cli/"));
  EXPECT_THAT(*out, HasSubstr("s3://cli-second/"));
}

TEST_F(CliS3Test, CpShowsProgressWhenAskedAndNotWhenQuiet) {
  WriteRandomFile(dir_ + "/p.bin", 3 << 20, 3);
  auto shown = testing::RunCommandOk({Stoker(), "cp", "--progress", dir_ + "/p.bin", "s3://cli/p"});
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_THAT(*shown, HasSubstr("cp: 3.0 MiB of 3.0 MiB (100%)"));
  EXPECT_THAT(*shown, HasSubstr("/s, 1 of 1 files"));
  auto quiet = testing::RunCommandOk({Stoker(), "cp", "-q", dir_ + "/p.bin", "s3://cli/q"});
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_EQ(*quiet, "");
}

TEST_F(CliS3Test, ExitCodesUsageVersionAndEnvironmentInHelp) {
  auto usage = testing::RunCommand({Stoker(), "cp", "only-one-argument"});
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->exit_code, 2);
  EXPECT_THAT(usage->output, HasSubstr("Usage: stoker cp [OPTIONS] SRC DST"));
  auto unknown = testing::RunCommand({Stoker(), "frobnicate"});
  EXPECT_EQ(unknown->exit_code, 2);
  EXPECT_THAT(unknown->output, HasSubstr("Usage: stoker"));
  auto bad_value = testing::RunCommand({Stoker(), "run", "x.json", "--epochs", "zero"});
  EXPECT_EQ(bad_value->exit_code, 2);
  EXPECT_THAT(bad_value->output, HasSubstr("Usage: stoker run"));
  auto failure = testing::RunCommand({Stoker(), "run", dir_ + "/missing.json"});
  EXPECT_EQ(failure->exit_code, 1);
  EXPECT_THAT(failure->output, HasSubstr("missing.json"));
  WriteRandomFile(dir_ + "/in-a-folder.bin", 10, 1);
  auto folder = testing::RunCommand({Stoker(), "cp", dir_, dir_ + "-copy"});
  EXPECT_EQ(folder->exit_code, 1);
  EXPECT_THAT(folder->output, HasSubstr("copy it with `stoker cp --recursive` or `stoker sync`"));
  auto version = testing::RunCommandOk({Stoker(), "--version"});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_THAT(*version, ::testing::MatchesRegex("stoker [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit "
                                                "[0-9a-f]+(-dirty)?\\)\n"));
  for (std::string command :
       {"", "ls", "cp", "sync", "run", "convert", "consume", "worker", "mount"}) {
    std::vector<std::string> argv = {Stoker()};
    if (!command.empty()) argv.push_back(command);
    argv.push_back("--help");
    auto help = testing::RunCommandOk(argv);
    ASSERT_TRUE(help.ok()) << help.status();
    EXPECT_THAT(*help, HasSubstr("AWS_ENDPOINT_URL")) << command;
    EXPECT_THAT(*help, HasSubstr("STOKER_MAX_REQUESTS")) << command;
    EXPECT_THAT(*help, HasSubstr("Exit status: 0 success, 1 failure, 2 usage error")) << command;
  }
}

}  // namespace
}  // namespace stoker
