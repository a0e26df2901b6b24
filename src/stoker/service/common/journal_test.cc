#include "stoker/service/common/journal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "stoker/core/strings.h"
#include "stoker/format/crc32c.h"
#include "stoker/testing/subprocess.h"

namespace stoker::service {
namespace {

// Writers (serialised, as the dispatcher's mutex does) and syncers at once: no SyncTo hangs or
// fails while others write and sync, and a reopened journal reads every update exactly once.
// (That a sync reached the disk cannot be observed here; the dispatcher's kill -9 test covers
// replay after a crash.)
TEST(Journal, GroupCommitFromManyThreads) {
  testing::ScopedTempDir dir("stoker-journal-test");
  auto journal = Journal::Open(dir.path());
  ASSERT_TRUE(journal.ok()) << journal.status();
  absl::Mutex write_mu;  // the owner serialises Write
  constexpr int kThreads = 8, kEach = 50;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        int64_t seq;
        {
          absl::MutexLock lock(&write_mu);
          auto written = (*journal)->Write({{"type", "x"}, {"t", t}, {"i", i}});
          ASSERT_TRUE(written.ok()) << written.status();
          seq = *written;
        }
        ASSERT_TRUE((*journal)->SyncTo(seq).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*journal)->written(), kThreads * kEach);
  auto reopened = Journal::Open(dir.path());
  ASSERT_TRUE(reopened.ok());
  auto updates = (*reopened)->ReadAll();
  ASSERT_TRUE(updates.ok()) << updates.status();
  ASSERT_EQ(updates->size(), static_cast<size_t>(kThreads * kEach));
  std::set<std::pair<int, int>> seen;
  for (const auto& u : *updates) seen.insert({u["t"].get<int>(), u["i"].get<int>()});
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_TRUE((*journal)->SyncTo(0).ok());  // nothing to wait for
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void AppendBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Opens the journal in `dir` (a restart) and returns the "i" of every update.
std::vector<int> Replay(const std::string& dir) {
  auto journal = Journal::Open(dir);
  EXPECT_TRUE(journal.ok()) << journal.status();
  if (!journal.ok()) return {};
  auto updates = (*journal)->ReadAll();
  EXPECT_TRUE(updates.ok()) << updates.status();
  std::vector<int> out;
  if (updates.ok()) {
    for (const auto& u : *updates) out.push_back(u["i"].get<int>());
  }
  return out;
}

TEST(Journal, RecordsCarryLengthAndCrc32c) {
  // "2 <crc32c("{}")> {}\n": the CRC-32C check value of "{}" from the portable implementation.
  std::string record = Journal::EncodeRecord("{}");
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", format::crc32c::ExtendPortable(0, "{}", 2));
  EXPECT_EQ(record, StrCat("2 ", crc, " {}\n"));
  size_t end = 0;
  auto payloads = Journal::ScanRecords(record + record, &end);
  EXPECT_EQ(payloads.size(), 2u);
  EXPECT_EQ(end, 2 * record.size());
}

// Torn and corrupt tails written by hand: each is cut off at open, the same state comes back at
// every later restart, and updates appended after the cut replay too (a torn line used to be
// skipped but kept, the next update was glued onto it, and the second restart failed).
TEST(Journal, TornOrCorruptTailIsCutOffAndRestartsAgree) {
  const std::string whole = Journal::EncodeRecord(R"({"i":100,"pad":"abcdefghij"})");
  const std::vector<std::pair<std::string, std::string>> tails = {
      {"half a record", whole.substr(0, whole.size() / 2)},
      {"all but the newline", whole.substr(0, whole.size() - 1)},
      {"only the length", "27"},
      {"a flipped payload byte",
       [&] {
         std::string s = whole;
         s[s.size() - 5] ^= 0x20;
         return s;
       }()},
      {"zeros (a power loss after the size grew)", std::string(300, '\0')},
      {"an old-style JSON line", "{\"i\":100}\n"},
  };
  for (const auto& [what, tail] : tails) {
    SCOPED_TRACE(what);
    testing::ScopedTempDir dir("stoker-journal-torn");
    {
      auto journal = Journal::Open(dir.path());
      ASSERT_TRUE(journal.ok());
      for (int i = 0; i < 3; ++i) ASSERT_TRUE((*journal)->Append({{"i", i}}).ok());
    }
    const std::string path = dir.path() + "/journal.log";
    const size_t good_size = ReadBytes(path).size();
    AppendBytes(path, tail);
    EXPECT_EQ(Replay(dir.path()), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(ReadBytes(path).size(), good_size);  // cut off on disk, not only skipped
    {
      auto journal = Journal::Open(dir.path());
      ASSERT_TRUE(journal.ok());
      ASSERT_TRUE((*journal)->Append({{"i", 3}}).ok());
    }
    EXPECT_EQ(Replay(dir.path()), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(Replay(dir.path()), (std::vector<int>{0, 1, 2, 3}));
  }
}

TEST(Journal, DamageInTheMiddleIsDataLossNotACut) {
  testing::ScopedTempDir dir("stoker-journal-middle");
  {
    auto journal = Journal::Open(dir.path());
    ASSERT_TRUE(journal.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*journal)->Append({{"i", i}}).ok());
  }
  const std::string path = dir.path() + "/journal.log";
  std::string bytes = ReadBytes(path);
  const size_t second = bytes.find('\n') + 1;
  bytes[second + 15] ^= 0x01;  // inside the second record's payload
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto journal = Journal::Open(dir.path());
  ASSERT_FALSE(journal.ok());
  EXPECT_TRUE(absl::IsDataLoss(journal.status())) << journal.status();
  EXPECT_NE(journal.status().message().find(StrCat("at byte ", second)), std::string::npos)
      << journal.status();
  EXPECT_EQ(ReadBytes(path), bytes);  // nothing cut
}

TEST(Journal, OlderFormatIsRefusedWithAMessage) {
  testing::ScopedTempDir dir("stoker-journal-old");
  std::ofstream(dir.path() + "/journal.jsonl") << "{\"type\":\"register_worker\"}\n";
  auto journal = Journal::Open(dir.path());
  ASSERT_FALSE(journal.ok());
  EXPECT_NE(journal.status().message().find("move the work dir aside"), std::string::npos);
}

// A writer process killed with SIGKILL at random points while it appends records of 2 MiB (a kill
// lands inside a write of several MiB, which the kernel leaves short: a real torn record). After
// each kill the journal is opened three times: always the same updates, a prefix of what was
// written, in order; then the writer goes on appending to the same journal.
TEST(Journal, KilledWriterLeavesAJournalThatReplaysTheSameEveryTime) {
  testing::ScopedTempDir dir("stoker-journal-kill");
  std::mt19937 rng(12345);
  int expected_next = 0;
  int cut_or_whole = 0;
  for (int round = 0; round < 6; ++round) {
    const int first = expected_next;
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto journal = Journal::Open(dir.path());
      if (!journal.ok()) ::_exit(2);
      const std::string pad((2 << 20) + 12345, 'x');
      for (int i = first;; ++i) {
        if (!(*journal)->Write({{"i", i}, {"pad", pad}}).ok()) ::_exit(3);
      }
    }
    // Kill when the file has grown by a random amount: usually in the middle of a write (the
    // file grows page by page while one write() of several MiB is copied).
    const std::string path = dir.path() + "/journal.log";
    auto size = [&path] {
      std::error_code ec;
      const uint64_t n = std::filesystem::file_size(path, ec);
      return ec ? uint64_t{0} : n;
    };
    const uint64_t kill_at = size() + (512 << 10) + rng() % (6 << 20);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (size() < kill_at && std::chrono::steady_clock::now() < deadline) {
    }
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the writer exited on its own: " << wstatus;
    const uint64_t size_before = size();
    std::vector<int> replayed = Replay(dir.path());
    cut_or_whole += size() < size_before;
    for (int restart = 0; restart < 2; ++restart) EXPECT_EQ(Replay(dir.path()), replayed);
    ASSERT_GE(static_cast<int>(replayed.size()), first);
    for (size_t k = 0; k < replayed.size(); ++k) ASSERT_EQ(replayed[k], static_cast<int>(k));
    expected_next = static_cast<int>(replayed.size());
  }
  EXPECT_GT(expected_next, 0);
  std::printf("journal kill test: %d updates survived 6 kills; %d kills left a torn tail\n",
              expected_next, cut_or_whole);
}

}  // namespace
}  // namespace stoker::service
