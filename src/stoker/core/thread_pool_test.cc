#include "stoker/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>

#include "stoker/core/thread.h"

namespace stoker {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskBeforeDestruction) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool("test", 3);
    for (int i = 0; i < 1000; ++i) pool.Schedule([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ThreadPoolTest, ThreadsAreCountedAndJoined) {
  int before = LiveThreadCount();
  {
    ThreadPool pool("count", 2);
    EXPECT_EQ(pool.num_threads(), 2);
  }
  EXPECT_EQ(LiveThreadCount(), before);
}

}  // namespace
}  // namespace stoker
