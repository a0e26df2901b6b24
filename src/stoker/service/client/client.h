// The client of the disaggregated service: one consumer of a job (docs/protocol.md; glossary in
// dispatcher/dispatcher.h).
//
//   ServiceClientOptions o;  o.dispatcher_address = "127.0.0.1:5000";
//   ASSIGN_OR_RETURN(auto client, ServiceClient::Open(o, spec_json));
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<data::Element> e, client->GetNext());
//     if (!e) break;  // end of data: every split of the job was delivered
//   }
//
// It creates (or joins, by name) the job, heartbeats the dispatcher (learning the workers and
// acknowledging the splits it holds in full), and fetches from every worker with up to
// requests_per_worker requests in flight to each, into a local prefetch buffer bounded by
// prefetch_bytes. The fetch threads are a pool shared by all workers (requests_per_worker per
// worker, at most kMaxFetchThreads), taken in turn, so a client's threads stay bounded however
// many workers register. Elements already held are dropped: the same index of one worker's stream
// (a response resent after one was lost), or the same split and sequence (a split re-served by
// another worker after its first worker was lost).
//
// Thread safety: GetNext is called by one thread at a time; stats() is thread-safe.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/data/tensor.h"
#include "stoker/data/to_device.h"
#include "stoker/service.grpc.pb.h"

namespace stoker::service {

struct ServiceClientOptions {
  std::string dispatcher_address;    // host:port
  std::string job_name;              // empty: an anonymous job of its own
  std::string sharding = "dynamic";  // or "off": every worker runs the whole pipeline
  std::string compression;      // of the job's payloads on the wire: "" / "none", "zstd", "lz4"
  int64_t num_epochs = 1;       // epochs of the job, delivered one after another (a named job keeps
                                // the number it was created with)
  int requests_per_worker = 2;  // GetElements requests in flight to each worker
  std::chrono::milliseconds heartbeat_interval{200};
  int64_t prefetch_bytes = int64_t{256} << 20;
  int64_t request_bytes = int64_t{8} << 20;  // most bytes asked of a worker per request
  // How long the dispatcher may stay unreachable before GetNext fails.
  std::chrono::milliseconds dispatcher_patience{60000};
};

// The most fetch threads a client runs, however many workers serve the job.
inline constexpr int kMaxFetchThreads = 32;

struct ServiceClientStats {
  int64_t elements = 0;    // delivered
  int64_t bytes = 0;       // payload bytes received (delivered ones)
  int64_t duplicates = 0;  // dropped because already held
  int64_t splits = 0;      // acknowledged as complete
};

class ServiceClient {
 public:
  // Validates the spec locally (its fingerprint and sample count go to the dispatcher), then
  // creates or joins the job; retries while the dispatcher is unreachable (bounded by patience).
  static absl::StatusOr<std::unique_ptr<ServiceClient>> Open(const ServiceClientOptions& options,
                                                             const std::string& spec_json);
  ~ServiceClient();  // stops and joins its threads

  // The next element; nullopt at the end of the job's data. When the spec ends with to_device,
  // the workers run it without that op and the element is moved to this process's GPU here.
  absl::StatusOr<std::optional<data::Element>> GetNext();

  int64_t job_id() const { return job_id_; }
  ServiceClientStats stats() const;

 private:
  struct Fetcher {
    int64_t worker_id = 0;
    std::string address;
    std::unique_ptr<WorkerService::Stub> stub;  // shared by the requests in flight
    bool removed = false;                       // the dispatcher no longer lists the worker
    bool ended = false;                // sharding off: the worker's whole stream was received
    int64_t received_below = 0;        // every index of its stream below this was received
    std::set<int64_t> received_above;  // indices received at or above received_below
    bool restart = false;  // a response was lost: the next request moves the cursor back
    int in_flight = 0;     // requests to this worker now
    std::chrono::steady_clock::time_point retry_at;  // after a failed request: not before
    std::chrono::milliseconds backoff{20};
  };
  struct SplitProgress {
    std::set<int64_t> sequences;  // received
    int64_t last = -1;            // sequence of the last element, once seen
  };

  explicit ServiceClient(const ServiceClientOptions& options) : options_(options) {}
  // The next element as the workers sent it.
  absl::StatusOr<std::optional<data::Element>> GetNextHost();
  void HeartbeatLoop();
  // One thread of the fetch pool: takes the workers in turn, one request at a time.
  void FetchLoop();
  // The next worker to ask (in turn, with fewer than requests_per_worker requests in flight, not
  // backing off), or null.
  Fetcher* NextFetcher() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an element received from `f`; returns false if it is a duplicate.
  bool Accept(Fetcher* f, const ElementData& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceClientOptions options_;
  int64_t job_id_ = 0;
  std::unique_ptr<DispatcherService::Stub> dispatcher_;
  std::thread heartbeat_;
  std::unique_ptr<data::DeviceStage> device_stage_;  // the spec's to_device, or null

  mutable absl::Mutex mu_;
  int64_t client_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::unique_ptr<Fetcher>> fetchers_ ABSL_GUARDED_BY(mu_);  // by worker id
  int64_t last_fetched_ ABSL_GUARDED_BY(mu_) = 0;  // worker id asked last (turns)
  std::vector<std::thread> fetch_threads_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ready_ ABSL_GUARDED_BY(mu_);  // payloads to deliver, in arrival order
  int64_t ready_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int64_t, SplitProgress> splits_ ABSL_GUARDED_BY(mu_);  // incomplete
  absl::flat_hash_set<int64_t> complete_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> to_ack_ ABSL_GUARDED_BY(mu_);
  // GetNext is starved while splits wait for acknowledgement (e.g. at the end of the job): the
  // heartbeat goes out now instead of at the next interval. Cleared once that heartbeat is back.
  bool heartbeat_now_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ServiceClientStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::service
