// Limits and failure reporting of the service's RPCs, against a real Dispatcher and a real Worker
// in-process over real gRPC (the fixture of service_rpc_test_fixture.h): sample counts the
// dispatcher cannot use must not poison its journal, a fingerprint that is not its spec's must
// not hijack another spec, every failing job gets its error, and a client's fetch threads stay a
// bounded pool however many workers are registered.
//
// No LABELS: it runs in the plain and the ASan+UBSan builds.
#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stoker/service/service_rpc_test_fixture.h"

namespace stoker::service::rpc_test {
namespace {

// Sample counts the dispatcher cannot use: each is refused, or accepted and then failed by the
// worker, and either way the journal still replays (an update that the state refuses must never
// be journaled).
// (Fixed in 53c2ac1.)
TEST_F(ServiceRpcTest, HostileSampleCountsDoNotPoisonTheJournal) {
  for (const auto& [sharding, num_samples] :
       std::vector<std::pair<ShardingMode, int64_t>>{{SHARDING_DYNAMIC, kMaxInt},
                                                     {SHARDING_DYNAMIC, int64_t{1} << 62},
                                                     {SHARDING_OFF, -1},
                                                     {SHARDING_OFF, kMinInt},
                                                     {SHARDING_OFF, kMaxInt}}) {
    GetOrCreateJobRequest req;
    req.set_spec_json(RangeSpec(10));
    req.set_fingerprint(Fingerprint(RangeSpec(10)));
    req.set_sharding_mode(sharding);
    req.set_num_samples(num_samples);
    GetOrCreateJobResponse resp;
    grpc::Status s = GetOrCreateJob(req, &resp);
    if (s.ok() && sharding == SHARDING_DYNAMIC) {
      // The spec has 10 samples: splits past them are an error at the worker.
      EXPECT_NE(WaitForJobError(resp.job_id()), "") << num_samples;
    } else if (!s.ok()) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    }
  }
  StartDispatcher(dispatcher_->port());
  ExpectNormalJobCompletes(100);
}

// A request whose fingerprint is not its spec's must not register the spec under another spec's
// fingerprint (every later job of that other spec would run the wrong pipeline). (Fixed
// in 53c2ac1.)
TEST_F(ServiceRpcTest, AMismatchedFingerprintDoesNotHijackASpec) {
  auto honest = data::Pipeline::FromString(RangeSpec(200));
  ASSERT_TRUE(honest.ok()) << honest.status();
  GetOrCreateJobRequest req;
  req.set_spec_json(RangeSpec(5));
  req.set_fingerprint((*honest)->fingerprint());
  req.set_num_samples(5);
  GetOrCreateJobResponse resp;
  grpc::Status s = GetOrCreateJob(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "a wrong fingerprint is refused";
  EXPECT_NE(s.error_message().find("fingerprint"), std::string::npos) << s.error_message();
  ExpectNormalJobCompletes(200);
}

// Several tasks failing between two worker heartbeats: every job gets its error (the worker once
// reported only the last; the others' consumers waited forever; fixed in
// 53c2ac1.)
TEST_F(ServiceRpcTest, FailuresOfSeveralJobsAreAllReported) {
  std::vector<int64_t> jobs;
  jobs.reserve(4);
  for (int i = 0; i < 4; ++i) jobs.push_back(CreateJob(kFailsWhenRun, 10));
  for (int64_t job : jobs) EXPECT_NE(WaitForJobError(job), "") << "job " << job;
}

int ThreadsInThisProcess() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// Anyone can register workers: a client's fetch threads are a bounded pool,
// not a few per listed worker, and a job still completes with hundreds of unreachable ones.
TEST_F(ServiceRpcTest, ManyRegisteredWorkersDoNotMultiplyClientThreads) {
  for (int i = 0; i < 300; ++i) {
    WorkerHeartbeatRequest req;
    req.set_address(StrCat("127.0.0.1:", 1 + i % 3));  // nothing listens there
    WorkerHeartbeatResponse resp;
    ASSERT_TRUE(WorkerHeartbeat(req, &resp).ok());
  }
  const int before = ThreadsInThisProcess();
  ServiceClientOptions o;
  o.dispatcher_address = StrCat("127.0.0.1:", dispatcher_->port());
  auto client = ServiceClient::Open(o, RangeSpec(200));
  ASSERT_TRUE(client.ok()) << client.status();
  std::map<std::string, int> seen;
  int most = 0;
  WithinDeadline(60s, "a job with 300 unreachable workers listed", [&] {
    while (true) {
      auto e = (*client)->GetNext();
      ASSERT_TRUE(e.ok()) << e.status();
      most = std::max(most, ThreadsInThisProcess());
      if (!e->has_value()) return;
      for (const std::string& key : (*e)->keys) ++seen[key];
    }
  });
  EXPECT_EQ(seen.size(), 200u);
  // The heartbeat thread, the fetch pool and a few of gRPC's own; not 2 x 300.
  EXPECT_LE(most - before, kMaxFetchThreads + 16) << "threads before " << before;
}

}  // namespace
}  // namespace stoker::service::rpc_test
