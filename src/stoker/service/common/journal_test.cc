#include "stoker/service/common/journal.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
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

}  // namespace
}  // namespace stoker::service
