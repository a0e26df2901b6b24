// The dispatcher of the disaggregated service (docs/protocol.md).
//
// Glossary
//   dataset   a pipeline spec, registered under its fingerprint (registering twice is a no-op).
//   job       one or more epochs of a dataset produced for its consumer(s); named jobs are shared
//   by
//             name (GetOrCreateJob returns the existing one), anonymous jobs are new on every call.
//   split     a contiguous run [begin, end) of the job's sample order (the source's shuffled index
//             permutation), sized by the worker to take about 100 ms; the unit of dynamic sharding,
//             of leases and of acknowledgement.
//   task      a job as it runs on one worker: the worker builds the pipeline and asks for splits.
//   consumer  a client reading a job's elements from every worker serving it.
//
// Protocol (all unary gRPC; service.proto)
//   client   -> dispatcher  GetOrCreateJob(spec, fingerprint, num_samples, name, sharding) -> job
//   id worker   -> dispatcher  WorkerHeartbeat(id, address, task errors, running jobs) -> id, tasks
//                           (every ~interval; held until the task list changes, at most wait_ms)
//   worker   -> dispatcher  GetSplit(worker, job, wanted samples) -> SPLIT(id, begin, end) | WAIT |
//   END client   -> dispatcher  ClientHeartbeat(job, client, delivered splits, leaving) -> workers,
//                           size, epochs done, finished
//   client   -> worker      GetElements(job, client, next index) -> elements tagged
//                           (split, sequence, last) with a raw payload (element_codec.h)
//
// Exactly-once: a split is leased to one worker at a time. It is done only when the consumer
// acknowledges it (all its elements received). A worker that misses heartbeats for
// worker_timeout is removed and its unacknowledged splits are leased again to live workers;
// pipelines are deterministic, so the re-run yields the same (split, sequence) elements and the
// client drops those it already has.
//
// Durability: the state (dispatcher_state.h) changes only through Apply(update), and each update is
// on disk in the journal in work_dir before any reply shows its effect: it is applied and written
// under the mutex, and every RPC, after releasing the mutex, waits until the journal is synced up
// to what was written so far (group commit: one fdatasync serves every RPC waiting then). An
// update the state refuses is never journaled; a failed journal write or sync stops the
// dispatcher. A restarted dispatcher replays the journal; its workers and
// clients retry their RPCs and carry on.
//
// Thread safety: all public methods are thread-safe (one mutex; it is held while an update is
// journaled so that the journal order is the apply order, but never across an RPC).
#pragma once

#include <grpcpp/server.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/metrics.h"
#include "stoker/service.grpc.pb.h"
#include "stoker/service/common/grpc_server.h"
#include "stoker/service/common/journal.h"
#include "stoker/service/common/security.h"
#include "stoker/service/dispatcher/autoscaler.h"
#include "stoker/service/dispatcher/dispatcher_state.h"
#include "stoker/service/dispatcher/worker_actuator.h"

namespace stoker::service {

struct DispatcherOptions {
  std::string work_dir;  // the journal lives here; empty: no journal (state is lost on exit)
  int port = 0;          // 0: any free port (see Dispatcher::port())
  // The address it listens on (--bind): every interface by default; "127.0.0.1" serves this
  // host only (a numeric IPv4 or IPv6 address of this host).
  std::string bind_address = "0.0.0.0";
  std::chrono::milliseconds worker_timeout{3000};  // missed heartbeats for this long: lost
  // A consumer silent for this long is removed; a job without a live consumer for this long is
  // ended and its tasks stop on every worker (docs/protocol.md, "Job life cycle").
  std::chrono::milliseconds client_timeout{30000};
  // The load (the counters workers and consumers send in their heartbeats) is measured over this
  // interval; the recommended worker count, and the autoscaler's decisions, follow each interval.
  std::chrono::milliseconds load_interval{2000};
  AutoscalerConfig autoscaler;  // used once StartAutoscaler is called
  // Limits on state peers create (0: none). A request that would pass one is refused with
  // RESOURCE_EXHAUSTED naming the limit and its flag: new jobs beyond max_jobs running jobs
  // (--max-jobs), new consumers beyond max_clients (--max-clients), new workers beyond
  // max_registered_workers (--max-registered-workers). Ended, finished and failed jobs do not
  // count.
  int64_t max_jobs = 1000;
  int64_t max_clients = 10000;
  int64_t max_registered_workers = 1000;
  // TLS and tokens (common/security.h): client RPCs need the client token, worker RPCs the
  // worker token.
  SecurityOptions security;
};

class Dispatcher {
 public:
  // Replays the journal, then serves on bind_address:port.
  static absl::StatusOr<std::unique_ptr<Dispatcher>> Start(const DispatcherOptions& options);
  ~Dispatcher();  // stops serving and joins its threads

  int port() const { return port_; }

  // The RPCs (the gRPC adapter calls these; tests may too).
  absl::Status GetOrCreateJob(const GetOrCreateJobRequest& req, GetOrCreateJobResponse* resp);
  absl::Status WorkerHeartbeat(const WorkerHeartbeatRequest& req, WorkerHeartbeatResponse* resp);
  absl::Status GetSplit(const GetSplitRequest& req, GetSplitResponse* resp);
  absl::Status ClientHeartbeat(const ClientHeartbeatRequest& req, ClientHeartbeatResponse* resp);

  // Acts on the autoscaler's decisions (docs/operations.md, "Autoscaler") through `actuator`,
  // which is asked for options.autoscaler.min_workers at once. Call at most once, after Start.
  // The dispatcher owns the actuator: its destructor destroys it (a local actuator drains its
  // workers then) before it stops serving.
  void StartAutoscaler(std::unique_ptr<WorkerActuator> actuator);

  // Updates applied since start (replayed ones included).
  int64_t updates_applied() const;

  // The status page served at `/` (docs/operations.md, "Status page"): one self-contained HTML
  // document (no scripts, no external resources; it reloads itself every 2 s) with the workers,
  // the newest jobs and the last events. Every string from outside is HTML-escaped.
  std::string StatusPage() const;

 private:
  explicit Dispatcher(const DispatcherOptions& options) : options_(options) {}
  absl::Status Update(const nlohmann::json& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A SPLIT reply for positions [begin, end) of the job (epoch and positions within it), naming
  // the consumer that holds the split in part, if one does (a shared job's split leased again).
  void SetSplit(const DispatcherState::Job& job, int64_t split_id, int64_t begin, int64_t end,
                GetSplitResponse* resp) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tasks every worker should run now (unfinished jobs without an error).
  // An unhealthy worker is listed only the tasks it runs already (`running`).
  void ListTasks(int64_t worker_id, const std::set<int64_t>& running, WorkerHeartbeatResponse* resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes lost workers and silent consumers, and ends jobs nobody consumes.
  void MonitorPeers();
  void CheckClients(std::chrono::steady_clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A heartbeat's wait_ms: holds (releasing mu_) until the job's workers differ from the
  // consumer's known_workers, the job or the consumer is gone, finished or failed, its size or
  // epochs done change (what the reply tells), or wait_ms.
  void AwaitWorkerChange(const ClientHeartbeatRequest& req, int64_t client_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a consumer; the job errs (coordinated) or ends (no consumer left) as the rules say.
  absl::Status RemoveClient(int64_t client_id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Logs a job's change of state made by the update just applied (finished, failed, collected).
  void LogJobTransition(const DispatcherState::Job& job, bool was_finished, bool had_error,
                        bool was_ended) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every load_interval: measures the load, recommends a worker count and, with an autoscaler,
  // acts on its decision.
  void MeasureLoop();
  AutoscalerLoad MeasureLoad(double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Updates remembered_need_ from the interval just measured (recommended_ is its rule).
  void RememberNeed(const AutoscalerLoad& load) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the state's gauges (workers, clients, jobs, splits) at each /metrics scrape.
  void CollectMetrics(MetricsWriter& w);
  // What a job reads (its spec's source: a URL, `range N`, a mix of URLs), cached by fingerprint.
  const std::string& DatasetLabel(const std::string& fingerprint) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Consumers of a job silent for longer than a few heartbeats (a process killed or stopped):
  // each with how long until the client timeout removes it, soonest first.
  std::vector<std::pair<int64_t, std::chrono::steady_clock::duration>> SilentClients(
      const DispatcherState::Job& job, std::chrono::steady_clock::time_point now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a running job has not ended (docs/operations.md, "Status page"): waiting for its first
  // consumer, for a silent consumer's timeout, for a worker, or its consumers reading.
  std::string RunningReason(const DispatcherState::Job& job,
                            std::chrono::steady_clock::time_point now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps an event (level "info" or "warning", and the message as logged) for the status page;
  // the last kMaxEvents are kept.
  void RecordEvent(const char* level, std::string message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kMaxEvents = 20;
  struct Event {
    std::string time;  // UTC, "YYYY-MM-DD HH:MM:SS"
    std::string level;
    std::string message;
  };

  const DispatcherOptions options_;
  int port_ = 0;
  int64_t metrics_collector_ = 0;  // id in MetricsRegistry::Default(); 0: none
  mutable absl::Mutex mu_;
  DispatcherState state_ ABSL_GUARDED_BY(mu_);
  // Set in Start before serving, never changed: Write under mu_, SyncTo without it.
  std::unique_ptr<Journal> journal_;
  absl::flat_hash_map<int64_t, std::chrono::steady_clock::time_point> last_heartbeat_
      ABSL_GUARDED_BY(mu_);
  // Clients: when each was last heard from; jobs: since when they have had no live consumer.
  absl::flat_hash_map<int64_t, std::chrono::steady_clock::time_point> client_seen_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::chrono::steady_clock::time_point> job_unconsumed_since_
      ABSL_GUARDED_BY(mu_);
  // Workers that say they are unhealthy (why), and the jobs each worker runs (its last heartbeat);
  // neither is journaled: workers report both in every heartbeat.
  absl::flat_hash_map<int64_t, std::string> unhealthy_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::set<int64_t>> running_ ABSL_GUARDED_BY(mu_);
  // Shared jobs: the splits each consumer holds in part or has not had acknowledged (its last
  // heartbeat's held_splits). Not journaled: consumers report it every heartbeat, and after a
  // restart no split is leased again before a worker timeout has passed (they reconnect first).
  absl::flat_hash_map<int64_t, std::set<int64_t>> held_splits_ ABSL_GUARDED_BY(mu_);
  mutable std::map<std::string, std::string> dataset_labels_ ABSL_GUARDED_BY(mu_);
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int64_t updates_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);  // oldest first; not journaled
  // Bumped by every update that can change a worker's task list (heartbeats wait for it).
  int64_t tasks_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Load: the totals of each worker's and consumer's last heartbeat, and those at the last
  // measurement (not journaled: heartbeats carry them again).
  struct WorkerTotals {
    double busy_seconds = 0;
    int64_t produced = 0;
  };
  struct ClientTotals {
    double wait_seconds = 0;
    double compute_seconds = 0;
    int64_t elements = 0;
    double first_wait_seconds = 0;  // of wait_seconds, before the first element; 0 until then
  };
  absl::flat_hash_map<int64_t, WorkerTotals> worker_totals_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, WorkerTotals> worker_measured_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, ClientTotals> client_totals_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, ClientTotals> client_measured_ ABSL_GUARDED_BY(mu_);
  // Consumers whose first look is pending, with when it is due; set at a consumer's first
  // heartbeat when there is an autoscaler, erased when a heartbeat past it asks for the look.
  absl::flat_hash_map<int64_t, std::chrono::steady_clock::time_point> first_look_due_
      ABSL_GUARDED_BY(mu_);
  bool measure_now_ ABSL_GUARDED_BY(mu_) = false;  // the measuring thread measures at once
  // The autoscaler's memory (docs/operations.md, "Autoscaler"): per pipeline fingerprint, the
  // most the rule called for while the last job of it was the only one read and its trainers
  // did not stall. Not journaled: a restarted dispatcher measures afresh.
  struct RememberedNeed {
    int64_t job_id = 0;
    int workers = 0;
  };
  absl::flat_hash_map<std::string, RememberedNeed> remembered_need_ ABSL_GUARDED_BY(mu_);
  // A job of a remembered pipeline got its first consumer: the measuring thread grows to this
  // at once (0: nothing asked), for this reason.
  int remembered_start_ ABSL_GUARDED_BY(mu_) = 0;
  std::string remembered_reason_ ABSL_GUARDED_BY(mu_);
  // A job of a pipeline not remembered got its first consumer: the measuring thread wakes the
  // actuator's standby workers at once (Autoscaler::Guess), for this reason; empty: none.
  std::string guess_reason_ ABSL_GUARDED_BY(mu_);
  // The last interval's rates, for the status page and /metrics.
  struct WorkerRates {
    double busy_share = 0;
    double elements_per_second = 0;
  };
  struct JobRates {
    double elements_per_second = 0;
    double stall_ratio = -1;  // -1: no consumer time measured
  };
  absl::flat_hash_map<int64_t, WorkerRates> worker_rates_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, JobRates> job_rates_ ABSL_GUARDED_BY(mu_);
  AutoscalerLoad load_ ABSL_GUARDED_BY(mu_);
  int recommended_ ABSL_GUARDED_BY(mu_) = -1;  // the rule's N; -1: unknown
  int target_ ABSL_GUARDED_BY(mu_) = -1;       // the autoscaler's; -1: no autoscaler
  std::string last_decision_ ABSL_GUARDED_BY(mu_);
  // Set once by StartAutoscaler; used by the measuring thread only, destroyed after it stopped.
  std::unique_ptr<Autoscaler> autoscaler_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WorkerActuator> actuator_ ABSL_GUARDED_BY(mu_);
  std::thread measure_;

  std::shared_ptr<const Security> security_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<GrpcServer> server_;
  std::thread monitor_;
};

}  // namespace stoker::service
