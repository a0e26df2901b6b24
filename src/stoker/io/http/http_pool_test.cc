// Response bodies come from the buffer pool: a steady stream of 10,000 ranged GETs against nginx
// (16 in flight, each body dropped once checked, as `stoker cat` does with its parts) reuses the
// same few blocks instead of allocating (and page-faulting) a new buffer per part.
#include <gtest/gtest.h>

#include <random>

#include "absl/synchronization/mutex.h"
#include "stoker/core/buffer_pool.h"
#include "stoker/io/http/http_store.h"
#include "stoker/testing/http_server.h"

namespace stoker::io {
namespace {

TEST(HttpPoolTest, TenThousandPartsDoNotGrowThePool) {
  auto server = testing::HttpTestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr uint64_t kObject = 4 << 20, kPart = 64 << 10;
  std::string bytes(kObject, '\0');
  std::mt19937 rng(5);
  for (char& c : bytes) c = static_cast<char>(rng());
  ASSERT_TRUE((*server)->WriteFile("object.bin", bytes).ok());
  std::string base = (*server)->url();
  base.pop_back();
  HttpStore store(base);

  absl::Mutex mu;
  int in_flight = 0, done = 0, wrong = 0;
  BufferPool::Stats after_warmup;
  constexpr int kParts = 10000, kWarmup = 1000;
  for (int i = 0; i < kParts; ++i) {
    {
      absl::MutexLock lock(&mu);
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight < 16; };
      mu.Await(absl::Condition(&room));
      ++in_flight;
    }
    if (i == kWarmup) {
      absl::MutexLock lock(&mu);
      auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight == 1; };
      mu.Await(absl::Condition(&idle));
      after_warmup = BufferPool::Default().stats();
    }
    const uint64_t offset = (i * kPart) % kObject;
    store.ReadAsync({"object.bin", {offset, kPart}, ""}, [&, offset](absl::StatusOr<Buffer> part) {
      bool ok = part.ok() && part->view() == std::string_view(bytes).substr(offset, kPart);
      part = Buffer();  // the part is written out and dropped
      absl::MutexLock lock(&mu);
      wrong += !ok;
      ++done;
      --in_flight;
    });
  }
  absl::MutexLock lock(&mu);
  auto finished = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return done == kParts; };
  mu.Await(absl::Condition(&finished));
  EXPECT_EQ(wrong, 0);
  BufferPool::Stats end = BufferPool::Default().stats();
  EXPECT_EQ(end.allocated, after_warmup.allocated) << "the pool grew after the warm-up";
  EXPECT_GE(end.reused - after_warmup.reused, uint64_t{kParts - kWarmup - 1});
  EXPECT_LE(end.allocated, 64u);  // about the parts in flight, not one per part
}

}  // namespace
}  // namespace stoker::io
