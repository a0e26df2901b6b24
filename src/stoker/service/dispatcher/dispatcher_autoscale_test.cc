// The dispatcher's side of autoscaling that a policy unit test cannot see (docs/operations.md,
// "Autoscaler"): a new consumer's first look decides without waiting for an interval's end (at
// its third element or after 150 ms), and a consumer's held heartbeat returns as soon as a worker
// joins or the job's size is known (docs/protocol.md). A
// real Dispatcher over real gRPC on loopback; the consumer and workers are heartbeats sent by the
// test, and the actuator records what it is asked for.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/client/client.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/testing/subprocess.h"

namespace stoker::service {
namespace {

using namespace std::chrono_literals;

// Records the worker counts asked for; the test waits for one.
class RecordingActuator : public WorkerActuator {
 public:
  explicit RecordingActuator(int standby) : standby_(standby) {}
  int standby_workers() const override { return standby_; }
  absl::Status Scale(int workers) override {
    absl::MutexLock lock(&mu_);
    asked_ = workers;
    return absl::OkStatus();
  }
  // The last count asked for once it is at least `workers`, or the last one after `timeout`.
  int WaitForAtLeast(int workers, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [&] { return asked_ >= workers; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return asked_;
  }

 private:
  const int standby_;  // what it says it could wake, however often it is asked
  absl::Mutex mu_;
  int asked_ = 0;
};

class DispatcherAutoscaleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DispatcherOptions d;
    d.work_dir = dir_.path() + "/dispatcher";
    // No interval ends during the test: any decision comes from a first look.
    d.load_interval = std::chrono::hours(1);
    d.autoscaler.min_workers = 1;
    d.autoscaler.max_workers = 6;
    Configure(&d);
    auto dispatcher = Dispatcher::Start(d);
    ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
    dispatcher_ = std::move(*dispatcher);
    auto actuator = std::make_unique<RecordingActuator>(StandbyWorkers());
    actuator_ = actuator.get();
    dispatcher_->StartAutoscaler(std::move(actuator));
    stub_ = DispatcherService::NewStub(MakeChannel(StrCat("127.0.0.1:", dispatcher_->port())));
  }

  virtual void Configure(DispatcherOptions*) {}
  virtual int StandbyWorkers() { return 0; }

  int64_t RegisterWorker(const std::string& address) {
    WorkerHeartbeatRequest req;
    req.set_address(address);
    WorkerHeartbeatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10s);
    EXPECT_TRUE(stub_->WorkerHeartbeat(&ctx, req, &resp).ok());
    return resp.worker_id();
  }
  int64_t CreateJob() {
    const std::string spec = R"({"source": {"range": 1000}})";
    GetOrCreateJobRequest req;
    req.set_spec_json(spec);
    req.set_fingerprint((*data::Pipeline::FromString(spec))->fingerprint());
    GetOrCreateJobResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10s);
    grpc::Status s = stub_->GetOrCreateJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }
  grpc::Status ClientHeartbeat(const ClientHeartbeatRequest& req, ClientHeartbeatResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 30s);
    return stub_->ClientHeartbeat(&ctx, req, resp);
  }
  // Sends `hb` (a long poll) from another thread, runs `meanwhile` 300 ms later (while the reply
  // is held), and waits for the reply into `held`; its status, and how long it took.
  std::pair<grpc::Status, std::chrono::steady_clock::duration> HeldAcross(
      const ClientHeartbeatRequest& hb, ClientHeartbeatResponse* held,
      const std::function<void()>& meanwhile) {
    grpc::Status status;
    const auto sent = std::chrono::steady_clock::now();
    std::thread consumer([&] { status = ClientHeartbeat(hb, held); });
    absl::SleepFor(absl::Milliseconds(300));
    meanwhile();
    consumer.join();
    return {status, std::chrono::steady_clock::now() - sent};
  }

  // One worker registered (the autoscaler asked for its minimum, 1), a job, and its consumer
  // registered with nothing read yet; *hb is that consumer's heartbeat, its id set.
  void StartConsumer(ClientHeartbeatRequest* hb) {
    RegisterWorker("127.0.0.1:1");
    ASSERT_EQ(actuator_->WaitForAtLeast(1, absl::Seconds(10)), 1);
    hb->set_job_id(CreateJob());
    ClientHeartbeatResponse resp;
    ASSERT_TRUE(ClientHeartbeat(*hb, &resp).ok());
    hb->set_client_id(resp.client_id());
  }

  testing::ScopedTempDir dir_{"dispatcher-autoscale-test"};
  std::unique_ptr<Dispatcher> dispatcher_;
  RecordingActuator* actuator_ = nullptr;
  std::unique_ptr<DispatcherService::Stub> stub_;
};

TEST_F(DispatcherAutoscaleTest, ANewConsumersFirstLookDecidesWithoutWaitingForTheInterval) {
  ClientHeartbeatRequest hb;
  ASSERT_NO_FATAL_FAILURE(StartConsumer(&hb));
  ClientHeartbeatResponse resp;
  absl::SleepFor(absl::Milliseconds(200));  // past the first look's 150 ms
  // Its first elements: 100 ms waiting for the first (start-up), then 5 more at 12 ms of work
  // each, waiting 18 ms for each: a stall of 0.6 with one worker, whose busy time no heartbeat
  // has reported. The rule: 1.1 * (5 / 0.06) / (5 / 0.15 per worker) = 2.75, so 3.
  hb.set_wait_seconds(0.1 + 5 * 0.018);
  hb.set_first_wait_seconds(0.1);
  hb.set_compute_seconds(5 * 0.012);
  hb.set_delivered_elements(6);
  ASSERT_TRUE(ClientHeartbeat(hb, &resp).ok());
  EXPECT_EQ(actuator_->WaitForAtLeast(3, absl::Seconds(30)), 3);
}

// The same dispatcher, its first look never due by time: only the elements can bring it.
class DispatcherAutoscaleElementsTest : public DispatcherAutoscaleTest {
  void Configure(DispatcherOptions* d) override {
    d->autoscaler.first_look = std::chrono::hours(1);
  }
};

TEST_F(DispatcherAutoscaleElementsTest, TheFirstLookComesWithTheThirdElement) {
  ClientHeartbeatRequest hb;
  ASSERT_NO_FATAL_FAILURE(StartConsumer(&hb));
  ClientHeartbeatResponse resp;
  // Two elements: not yet (no decision can come from time either).
  hb.set_wait_seconds(0.1 + 0.018);
  hb.set_first_wait_seconds(0.1);
  hb.set_compute_seconds(0.012);
  hb.set_delivered_elements(2);
  ASSERT_TRUE(ClientHeartbeat(hb, &resp).ok());
  EXPECT_EQ(actuator_->WaitForAtLeast(2, absl::Milliseconds(300)), 1);
  // The third, as ServiceClient sends it at once: the first and two at 12 ms of work, waiting
  // 18 ms for each (stall 0.6). The rule: 1.1 * (2 / 0.024) / (2 / 0.06 per worker) = 2.75, so 3.
  static_assert(kFirstLookElements == 3);
  hb.set_wait_seconds(0.1 + 2 * 0.018);
  hb.set_compute_seconds(2 * 0.012);
  hb.set_delivered_elements(kFirstLookElements);
  ASSERT_TRUE(ClientHeartbeat(hb, &resp).ok());
  EXPECT_EQ(actuator_->WaitForAtLeast(3, absl::Seconds(30)), 3);
}

// An actuator with 2 standby workers: a job of a pipeline never read wakes them as its first
// consumer registers, before any element (Autoscaler::Guess); its later consumers do not.
class DispatcherAutoscaleStandbyTest : public DispatcherAutoscaleElementsTest {
  int StandbyWorkers() override { return 2; }
};

TEST_F(DispatcherAutoscaleStandbyTest, ANewPipelinesFirstConsumerWakesTheStandbyWorkers) {
  ClientHeartbeatRequest hb;
  ASSERT_NO_FATAL_FAILURE(StartConsumer(&hb));
  EXPECT_EQ(actuator_->WaitForAtLeast(3, absl::Seconds(30)), 3);
  ClientHeartbeatResponse resp;
  ClientHeartbeatRequest second;  // another trainer of the same job
  second.set_job_id(hb.job_id());
  ASSERT_TRUE(ClientHeartbeat(second, &resp).ok());
  EXPECT_EQ(actuator_->WaitForAtLeast(4, absl::Milliseconds(500)), 3);
}

TEST_F(DispatcherAutoscaleTest, AHeldHeartbeatReturnsWhenAWorkerCountsTheJob) {
  const int64_t worker = RegisterWorker("127.0.0.1:1");
  ClientHeartbeatRequest hb;
  hb.set_job_id(CreateJob());
  ClientHeartbeatResponse resp;
  ASSERT_TRUE(ClientHeartbeat(hb, &resp).ok());
  ASSERT_EQ(resp.num_samples(), 0);  // no worker has counted it yet
  hb.set_client_id(resp.client_id());
  hb.set_wait_ms(8000);
  hb.add_known_workers(worker);
  ClientHeartbeatResponse held;
  const auto [status, took] = HeldAcross(hb, &held, [&] {
    GetSplitRequest split;  // the worker's first split request reports the count
    split.set_worker_id(worker);
    split.set_job_id(hb.job_id());
    split.set_wanted_samples(10);
    split.set_last_split_id(-1);
    split.set_num_samples(1000);
    GetSplitResponse granted;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10s);
    EXPECT_TRUE(stub_->GetSplit(&ctx, split, &granted).ok());
  });
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(held.num_samples(), 1000);
  EXPECT_LT(took, 7s);  // at the count, not at wait_ms (8 s)
}

TEST_F(DispatcherAutoscaleTest, AStarvingConsumersHeldHeartbeatReturnsWhenAWorkerJoins) {
  const int64_t first = RegisterWorker("127.0.0.1:1");
  ClientHeartbeatRequest hb;
  hb.set_job_id(CreateJob());
  ClientHeartbeatResponse resp;
  ASSERT_TRUE(ClientHeartbeat(hb, &resp).ok());
  hb.set_client_id(resp.client_id());
  ASSERT_EQ(resp.workers_size(), 1);
  hb.set_wait_ms(8000);
  hb.add_known_workers(first);
  ClientHeartbeatResponse held;
  const auto [status, took] = HeldAcross(hb, &held, [&] { RegisterWorker("127.0.0.1:2"); });
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(held.workers_size(), 2);
  // Answered at the change, not at wait_ms (8 s; the join comes after 0.3 s).
  EXPECT_LT(took, 7s);
  // Nothing to wait for: the workers it names are not the job's (one left): answered at once.
  ClientHeartbeatRequest stale = hb;
  stale.clear_known_workers();
  stale.add_known_workers(first);
  stale.add_known_workers(first + 100);
  const auto again = std::chrono::steady_clock::now();
  ASSERT_TRUE(ClientHeartbeat(stale, &held).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - again, 7s);
}

}  // namespace
}  // namespace stoker::service
