// The fixture shared by the service's RPC tests (service_rpc_test.cc: malformed and hostile
// requests and workers; service_rpc_limits_test.cc: limits and failure reporting): a real
// Dispatcher (with a journal in a temporary folder, restartable on its port) and a real Worker,
// in-process over real gRPC on loopback, typed and raw calls that each carry a deadline, a hang
// guard (WithinDeadline), and a check that a normal job still delivers every sample exactly once.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/client/client.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"
#include "stoker/testing/subprocess.h"

namespace stoker::service::rpc_test {

using namespace std::chrono_literals;

inline constexpr auto kCallDeadline = 10s;  // every RPC of this test; none should come near it
inline constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kMinInt = std::numeric_limits<int64_t>::min();

// Runs `body` on a thread and aborts the test process if it has not returned by `limit`: a hang is
// a failure, reported at once rather than at the CTest timeout.
inline void WithinDeadline(std::chrono::seconds limit, const std::string& what,
                           std::function<void()> body) {
  absl::Notification done;
  std::thread t = StartThread("rpc-test", [&] {
    body();
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(absl::FromChrono(limit))) {
    std::fprintf(stderr, "service_rpc_test: %s did not finish within %lld s (hang)\n", what.c_str(),
                 static_cast<long long>(limit.count()));
    std::abort();
  }
  t.join();
}

// A spec over `n` in-memory samples (keys "0" .. "n-1").
inline std::string RangeSpec(int64_t n) { return StrCat(R"({"source": {"range": )", n, "}}"); }

inline std::string Fingerprint(const std::string& spec) {
  auto pipeline = data::Pipeline::FromString(spec);
  return pipeline.ok() ? (*pipeline)->fingerprint() : StrCat("no-spec-", spec.size());
}

// A spec that parses but fails when it runs (decode_image of an int64 field).
inline constexpr char kFailsWhenRun[] =
    R"({"source": {"range": 10}, "ops": [{"op": "decode_image", "field": "value"}]})";

class ServiceRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartDispatcher(0);
    WorkerOptions w;
    w.dispatcher_address = StrCat("127.0.0.1:", dispatcher_->port());
    w.heartbeat_interval = 100ms;
    w.buffer_bytes = 1 << 20;  // hostile jobs fill it and wait: bounded memory
    w.threads = 1;
    auto worker = Worker::Start(w);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
    worker_channel_ = MakeChannel(StrCat("127.0.0.1:", worker_->port()));
    worker_stub_ = WorkerService::NewStub(worker_channel_);
  }

  // (Re)starts the dispatcher on `port` (0: any) over the test's work dir.
  void StartDispatcher(int port) {
    dispatcher_.reset();
    DispatcherOptions d;
    d.work_dir = work_dir_.path() + "/dispatcher";
    d.port = port;
    d.worker_timeout = 1000ms;  // workers registered by hostile heartbeats go away soon
    d.client_timeout = client_timeout_;
    auto dispatcher = Dispatcher::Start(d);
    ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
    dispatcher_ = std::move(*dispatcher);
    dispatcher_channel_ = MakeChannel(StrCat("127.0.0.1:", dispatcher_->port()));
    dispatcher_stub_ = DispatcherService::NewStub(dispatcher_channel_);
  }

  // One unary call with raw request bytes; the status it ended with.
  static grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& method, std::string_view bytes) {
    grpc::GenericStub stub(channel);
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallDeadline);
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();  // bounded by the call's deadline
    return status;
  }
  grpc::Status Raw(const std::string& method, std::string_view bytes) {
    bool to_worker = method.find("WorkerService") != std::string::npos;
    return RawCall(to_worker ? worker_channel_ : dispatcher_channel_, method, bytes);
  }

  // Typed calls, each with the deadline.
  grpc::Status GetOrCreateJob(const GetOrCreateJobRequest& req, GetOrCreateJobResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallDeadline);
    return dispatcher_stub_->GetOrCreateJob(&ctx, req, resp);
  }
  grpc::Status WorkerHeartbeat(const WorkerHeartbeatRequest& req, WorkerHeartbeatResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallDeadline);
    return dispatcher_stub_->WorkerHeartbeat(&ctx, req, resp);
  }
  grpc::Status GetSplit(const GetSplitRequest& req, GetSplitResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallDeadline);
    return dispatcher_stub_->GetSplit(&ctx, req, resp);
  }
  grpc::Status ClientHeartbeat(const ClientHeartbeatRequest& req, ClientHeartbeatResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallDeadline);
    return dispatcher_stub_->ClientHeartbeat(&ctx, req, resp);
  }
  grpc::Status GetElements(const GetElementsRequest& req, GetElementsResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallDeadline);
    return worker_stub_->GetElements(&ctx, req, resp);
  }

  // Asks for a job of `spec` under the spec's own fingerprint (a made-up one if it does not parse).
  grpc::Status TryCreateJob(const std::string& spec, int64_t num_samples, int64_t* job_id,
                            const std::string& name = "") {
    GetOrCreateJobRequest req;
    req.set_spec_json(spec);
    req.set_fingerprint(Fingerprint(spec));
    req.set_num_samples(num_samples);
    req.set_job_name(name);
    GetOrCreateJobResponse resp;
    grpc::Status s = GetOrCreateJob(req, &resp);
    *job_id = resp.job_id();
    return s;
  }
  int64_t CreateJob(const std::string& spec, int64_t num_samples, const std::string& name = "") {
    int64_t id = 0;
    grpc::Status s = TryCreateJob(spec, num_samples, &id, name);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(id, 0);
    return id;
  }

  // The error the dispatcher reports for `job_id` once a worker failed to run it ("" if none
  // came within the limit).
  std::string WaitForJobError(int64_t job_id) {
    auto limit = std::chrono::steady_clock::now() + 30s;
    int64_t client_id = 0;  // registered by the first heartbeat
    while (std::chrono::steady_clock::now() < limit) {
      ClientHeartbeatRequest req;
      req.set_job_id(job_id);
      req.set_client_id(client_id);
      ClientHeartbeatResponse resp;
      grpc::Status s = ClientHeartbeat(req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      client_id = resp.client_id();
      if (!s.ok() || !resp.job_error().empty()) return resp.job_error();
      absl::SleepFor(absl::Milliseconds(20));  // polling an RPC, not synchronising threads
    }
    return "";
  }

  // A normal job of `n` samples through the service: every key arrives exactly once. `o`: the
  // client's options (an empty address: the dispatcher's).
  void ExpectNormalJobCompletes(int64_t n, ServiceClientOptions o = {}) {
    std::map<std::string, int> seen;
    absl::Status status;
    if (o.dispatcher_address.empty())
      o.dispatcher_address = StrCat("127.0.0.1:", dispatcher_->port());
    o.dispatcher_patience = 20000ms;
    WithinDeadline(120s, "the normal job", [&] {
      auto client = ServiceClient::Open(o, RangeSpec(n));
      if (!client.ok()) {
        status = client.status();
        return;
      }
      while (true) {
        auto e = (*client)->GetNext();
        if (!e.ok()) {
          status = e.status();
          return;
        }
        if (!e->has_value()) return;
        for (const std::string& key : (*e)->keys) ++seen[key];
      }
    });
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(seen.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[StrCat(i)], 1) << "key " << i;
  }

  std::chrono::milliseconds client_timeout_ = 30000ms;  // of the next StartDispatcher
  testing::ScopedTempDir work_dir_{"service-rpc-test"};
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<Worker> worker_;
  std::shared_ptr<grpc::Channel> dispatcher_channel_, worker_channel_;
  std::unique_ptr<DispatcherService::Stub> dispatcher_stub_;
  std::unique_ptr<WorkerService::Stub> worker_stub_;
};

}  // namespace stoker::service::rpc_test
