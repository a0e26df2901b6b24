// The public Consumer (include/stoker/service/consumer.h) against an in-process dispatcher and
// worker: epochs, checkpoint and resume, Cancel from another thread, Close, and the errors of
// Create. (tests/install/ runs it against the installed `stoker` binaries.)
#include "stoker/service/consumer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "stoker/core/strings.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"

namespace stoker::service {
namespace {

using namespace std::chrono_literals;

class ConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dispatcher = Dispatcher::Start(DispatcherOptions{});
    ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
    dispatcher_ = std::move(*dispatcher);
    options_.dispatcher_address = StrCat("127.0.0.1:", dispatcher_->port());
    options_.connect_timeout = 5s;
  }

  void StartWorker() {
    WorkerOptions w;
    w.dispatcher_address = options_.dispatcher_address;
    w.heartbeat_interval = 100ms;
    w.threads = 1;
    auto worker = Worker::Start(w);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
  }

  // Keys of the elements Next returns until the end of the epoch, or `max` elements.
  static std::vector<std::string> ReadEpoch(Consumer& c, int max = 1 << 30) {
    std::vector<std::string> keys;
    for (int n = 0; n < max; ++n) {
      auto e = c.Next(30s);
      EXPECT_TRUE(e.ok()) << e.status();
      if (!e.ok() || !e->has_value()) break;
      for (const std::string& k : (*e)->keys) keys.push_back(k);
    }
    return keys;
  }

  static std::vector<std::string> Range(int begin, int end) {
    std::vector<std::string> keys;
    for (int i = begin; i < end; ++i) keys.push_back(std::to_string(i));
    return keys;
  }

  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<Worker> worker_;
  ConsumerOptions options_;
};

TEST_F(ConsumerTest, ReadsEveryEpochInOrder) {
  StartWorker();
  options_.num_epochs = 2;
  auto c = Consumer::Create(options_, R"({"source": {"range": 30}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT((*c)->job_id(), 0);
  EXPECT_FALSE((*c)->fingerprint().empty());
  EXPECT_EQ(ReadEpoch(**c), Range(0, 30));
  EXPECT_EQ((*c)->epoch(), 0);
  ASSERT_TRUE((*c)->AdvanceEpoch());
  EXPECT_EQ((*c)->epoch(), 1);
  EXPECT_EQ(ReadEpoch(**c), Range(0, 30));
  EXPECT_FALSE((*c)->AdvanceEpoch());
  EXPECT_EQ((*c)->stats().elements, 60);
  EXPECT_EQ((*c)->stats().duplicates, 0);
}

TEST_F(ConsumerTest, ResumesFromACheckpointToken) {
  StartWorker();
  const char* spec = R"({"source": {"range": 40}, "ops": [{"op": "batch", "size": 3}]})";
  std::vector<std::string> keys;
  {
    auto c = Consumer::Create(options_, spec);
    ASSERT_TRUE(c.ok()) << c.status();
    keys = ReadEpoch(**c, /*max=*/5);
    ASSERT_EQ(keys.size(), 15u);
    auto token = (*c)->Checkpoint();
    ASSERT_TRUE(token.ok()) << token.status();
    options_.resume = *token;
  }  // the destructor leaves the job
  auto resumed = Consumer::Create(options_, spec);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (const std::string& k : ReadEpoch(**resumed)) keys.push_back(k);
  EXPECT_EQ(keys, Range(0, 40));  // the rest, once each, in order
}

TEST_F(ConsumerTest, CancelFromAnotherThreadEndsAWaitingNext) {
  // No worker: Next waits until cancelled.
  auto c = Consumer::Create(options_, R"({"source": {"range": 10}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(absl::IsDeadlineExceeded((*c)->Next(100ms).status()));
  std::thread canceller([&] {
    std::this_thread::sleep_for(200ms);
    (*c)->Cancel();
  });
  auto e = (*c)->Next();
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(e.status())) << e.status();
}

TEST_F(ConsumerTest, CloseLeavesTheJobAndKeepsTheCounters) {
  StartWorker();
  auto c = Consumer::Create(options_, R"({"source": {"range": 10}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReadEpoch(**c, /*max=*/4), Range(0, 4));
  (*c)->Close();
  (*c)->Close();   // idempotent
  (*c)->Cancel();  // harmless after Close
  EXPECT_TRUE(absl::IsFailedPrecondition((*c)->Next().status()));
  EXPECT_TRUE(absl::IsFailedPrecondition((*c)->Checkpoint().status()));
  EXPECT_FALSE((*c)->AdvanceEpoch());
  EXPECT_EQ((*c)->stats().elements, 4);
  EXPECT_EQ((*c)->epoch(), 0);
}

TEST_F(ConsumerTest, CreateRefusesBadInputAtOnce) {
  ConsumerOptions o = options_;
  o.sharding = static_cast<Sharding>(7);  // not a mode: named with the values allowed
  auto c = Consumer::Create(o, R"({"source": {"range": 10}})");
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_NE(c.status().message().find("unknown sharding 7: use 'dynamic' or 'off'"),
            std::string_view::npos)
      << c.status();

  o = options_;
  o.prefetch_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Consumer::Create(o, R"({"source": {"range": 1}})").status()));

  o = options_;
  o.token_file = "/nonexistent/client.token";
  c = Consumer::Create(o, R"({"source": {"range": 10}})");
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/client.token"), std::string_view::npos)
      << c.status();

  EXPECT_FALSE(Consumer::Create(options_, "{not json").ok());
}

TEST_F(ConsumerTest, CreateFailsWithinTheConnectTimeout) {
  const int port = dispatcher_->port();
  dispatcher_.reset();  // nothing listens there now
  ConsumerOptions o = options_;
  o.connect_timeout = 500ms;
  auto start = std::chrono::steady_clock::now();
  auto c = Consumer::Create(o, R"({"source": {"range": 10}})");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(StrCat("127.0.0.1:", port)), std::string_view::npos)
      << c.status();
  EXPECT_LT(took, 5s);
}

}  // namespace
}  // namespace stoker::service
