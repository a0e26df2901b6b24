// Bounded state per peer on a real Worker and Dispatcher (in-process, gRPC on loopback): 1,000
// invented client ids asking a job's elements leave no stream behind, or are refused at
// --max-clients-per-job with a message naming the flag; the worker's /metrics gauge
// (stoker_worker_client_streams) says how many streams it keeps. The dispatcher refuses jobs,
// clients and workers beyond its limits the same way.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "stoker/core/metrics.h"
#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"

namespace stoker::service {
namespace {

using namespace std::chrono_literals;

// The value of an unlabelled series on the process's /metrics, or -1.
double MetricValue(const std::string& name) {
  std::string text = MetricsRegistry::Default().Render();
  size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

struct Outcome {
  int ok = 0;
  int exhausted = 0;
  std::string message;  // of a refusal
  double streams = -1;  // the gauge afterwards
};

// A dispatcher, a worker with `max_clients` and a 2-byte buffer (its producer stops after the
// first element of the first split), a job, one consumer (client 1) that received an element,
// then 1,000 invented client ids asking the job's elements.
Outcome InventedClients(int max_clients) {
  Outcome out;
  DispatcherOptions d;
  auto dispatcher = Dispatcher::Start(d);
  EXPECT_TRUE(dispatcher.ok()) << dispatcher.status();
  if (!dispatcher.ok()) return out;
  WorkerOptions w;
  w.dispatcher_address = StrCat("127.0.0.1:", (*dispatcher)->port());
  w.heartbeat_interval = 50ms;
  w.buffer_bytes = 2;  // production waits for room at half of it: room for one split
  w.threads = 1;
  w.max_clients_per_job = max_clients;
  auto worker = Worker::Start(w);
  EXPECT_TRUE(worker.ok()) << worker.status();
  if (!worker.ok()) return out;

  nlohmann::json spec = {{"source", {{"range", 100000}}}};
  GetOrCreateJobRequest create;
  create.set_spec_json(spec.dump());
  create.set_fingerprint(data::Pipeline::Fingerprint(spec));
  GetOrCreateJobResponse job;
  auto dispatcher_stub =
      DispatcherService::NewStub(MakeChannel(StrCat("127.0.0.1:", (*dispatcher)->port())));
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10s);
    grpc::Status s = dispatcher_stub->GetOrCreateJob(&ctx, create, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  auto stub = WorkerService::NewStub(MakeChannel((*worker)->address()));
  auto ask = [&](int64_t client, GetElementsResponse* resp) {
    GetElementsRequest req;
    req.set_job_id(job.job_id());
    req.set_client_id(client);
    req.set_max_bytes(1 << 10);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10s);
    return stub->GetElements(&ctx, req, resp);
  };
  // Client 1 holds the first split.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (true) {
    GetElementsResponse resp;
    grpc::Status s = ask(1, &resp);
    if (s.ok() && resp.elements_size() > 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "client 1 got no element: " << s.error_message();
      return out;
    }
  }
  // 20 threads of 50 ids each (a request that finds nothing waits up to 50 ms for elements).
  std::mutex mu;
  std::vector<std::thread> threads;
  threads.reserve(20);
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t id = 1000 + t * 50; id < 1000 + (t + 1) * 50; ++id) {
        GetElementsResponse resp;
        grpc::Status s = ask(id, &resp);
        std::lock_guard<std::mutex> lock(mu);
        if (s.ok()) {
          ++out.ok;
        } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ++out.exhausted;
          out.message = s.error_message();
        } else {
          ADD_FAILURE() << "client " << id << ": " << s.error_message();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  out.streams = MetricValue("stoker_worker_client_streams");
  return out;
}

TEST(WorkerLimits, InventedClientIdsLeaveNoStreamBehind) {
  Outcome o = InventedClients(/*max_clients=*/0);
  EXPECT_EQ(o.ok, 1000);
  EXPECT_EQ(o.exhausted, 0);
  // Client 1's stream only (the producer waits on its full buffer: nothing for the others).
  EXPECT_EQ(o.streams, 1);
}

TEST(WorkerLimits, ClientsBeyondTheLimitAreRefusedNamingTheFlag) {
  Outcome o = InventedClients(/*max_clients=*/1);
  EXPECT_EQ(o.ok, 0);
  EXPECT_EQ(o.exhausted, 1000);
  EXPECT_NE(o.message.find("--max-clients-per-job (1)"), std::string::npos) << o.message;
  EXPECT_EQ(o.streams, 1);
}

TEST(DispatcherLimits, JobsClientsAndWorkersBeyondTheLimitsAreRefusedNamingTheFlag) {
  DispatcherOptions d;
  d.max_jobs = 2;
  d.max_clients = 1;
  d.max_registered_workers = 1;
  auto dispatcher = Dispatcher::Start(d);
  ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
  for (int i = 0; i < 3; ++i) {
    nlohmann::json spec = {{"source", {{"range", 10 + i}}}};
    GetOrCreateJobRequest req;
    req.set_spec_json(spec.dump());
    req.set_fingerprint(data::Pipeline::Fingerprint(spec));
    GetOrCreateJobResponse resp;
    absl::Status s = (*dispatcher)->GetOrCreateJob(req, &resp);
    if (i < 2) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
      EXPECT_NE(s.message().find("--max-jobs (2)"), std::string::npos) << s;
    }
  }
  for (int i = 0; i < 2; ++i) {
    ClientHeartbeatRequest req;
    req.set_job_id(1 + i);
    ClientHeartbeatResponse resp;
    absl::Status s = (*dispatcher)->ClientHeartbeat(req, &resp);
    if (i == 0) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
      EXPECT_NE(s.message().find("--max-clients (1)"), std::string::npos) << s;
    }
  }
  for (int i = 0; i < 2; ++i) {
    WorkerHeartbeatRequest req;
    req.set_address(StrCat("127.0.0.1:", 1000 + i));
    WorkerHeartbeatResponse resp;
    absl::Status s = (*dispatcher)->WorkerHeartbeat(req, &resp);
    if (i == 0) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
      EXPECT_NE(s.message().find("--max-registered-workers (1)"), std::string::npos) << s;
    }
  }
}

}  // namespace
}  // namespace stoker::service
