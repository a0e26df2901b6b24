// A worker of the disaggregated service (docs/protocol.md; glossary in dispatcher/dispatcher.h).
//
// It registers with the dispatcher and heartbeats every heartbeat_interval; the reply lists the
// tasks it should run. For each task it builds the job's pipeline and, with dynamic sharding, asks
// the dispatcher for splits sized so that one takes about split_target to process, runs each split
// through a fresh pipeline iterator, and appends the elements, tagged (split, sequence, last), to
// the task's buffer, encoded (and compressed if the job says so) once. With sharding off it runs
// the whole pipeline. The buffer is bounded by buffer_bytes: production waits while it is full.
// Clients read it with GetElements: a request names the first index the client has not received
// (everything before it is dropped then, never earlier, so nothing is lost with a response) and
// gets the elements after the client's send cursor, so several requests can be in flight; a
// `restart` request moves the cursor back. Replies reference the buffered payloads without
// copying them (elements_response.h).
//
// The heartbeat is a long poll: the dispatcher holds it until the task list changes (or the
// interval passes), so a new job starts on every worker within milliseconds.
//
// Thread safety: all public methods are thread-safe. One mutex; no lock is held across an RPC.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/metrics.h"
#include "stoker/data/pipeline.h"
#include "stoker/service.grpc.pb.h"
#include "stoker/service.pb.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_server.h"
#include "stoker/service/common/security.h"
#include "stoker/service/common/shm_ring.h"

namespace stoker::service {

struct WorkerOptions {
  std::string dispatcher_address;  // host:port
  int port = 0;                    // 0: any free port
  // The address it listens on (--bind): every interface by default; "127.0.0.1" serves this
  // host only. `host` must be an address clients reach it at through this one.
  std::string bind_address = "0.0.0.0";
  std::string host = "127.0.0.1";  // the host clients reach this worker at
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds split_target{100};  // processing time a split is sized for
  int64_t buffer_bytes = int64_t{256} << 20;    // per task, of encoded elements
  // Cross-trainer cache jobs: the sliding window of elements the fastest trainer has read, kept
  // for the trainers behind it, in bytes per task (--cache-bytes). A trainer behind the window
  // gets its elements recomputed (or skipped, as the job says).
  int64_t cache_bytes = int64_t{256} << 20;
  int threads = 0;  // pipeline threads; 0: the spec's setting
  // The only folders plugin libraries named in clients' specs are loaded from (--plugin-dir);
  // none by default, so no plugin (data::PluginPolicy, docs/security.md).
  std::vector<std::string> plugin_dirs;
  // After this many tasks in a row failed, the worker is unhealthy: it reports so to the
  // dispatcher (which gives it no new task) and /healthz answers 503. 0: never.
  int unhealthy_after_failures = 3;
  // The most consumers (client ids) a job's task keeps a stream for; GetElements from one more is
  // refused with RESOURCE_EXHAUSTED naming --max-clients-per-job. 0: no limit. A stream that
  // holds nothing (no element or split handed to it yet) is not kept between requests, and a
  // removed consumer's stream is dropped, so idle or invented ids leave no state behind.
  int max_clients_per_job = 1024;
  // Shared memory (docs/protocol.md): a consumer on this host (same boot id and namespaces) that
  // asks for it gets payloads through a segment of this many bytes, one per consumer and job,
  // instead of in the reply (--shm-bytes; 0: never). A full segment sends the bytes inline. A
  // task makes at most max_clients_per_job segments; later consumers get the bytes inline. The
  // trainers of a cross-trainer job share one segment of shm_bytes + cache_bytes.
  int64_t shm_bytes = int64_t{256} << 20;
  // TLS and tokens (common/security.h): clients' GetElements needs the client token; the worker
  // presents the worker token to the dispatcher.
  SecurityOptions security;
  // Called by Start once the worker serves and has begun connecting to the dispatcher, before it
  // registers (a standby worker of the local autoscaler waits here for its go: `stoker worker
  // --standby-fd`); an error is returned by Start, and the worker never registers. Empty:
  // register at once.
  std::function<absl::Status()> before_register;
};

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Start(const WorkerOptions& options);
  ~Worker();  // stops serving, cancels tasks and joins every thread

  // A graceful stop (scale-down): asks for no more splits, finishes the ones it runs, waits until
  // clients have received every buffered element (or `timeout` passes), then tells the dispatcher
  // it leaves, so that splits no consumer acknowledged are leased again at once. Tasks with
  // sharding off are abandoned (their stream would be cut short). Call it once, before destruction.
  void Drain(std::chrono::milliseconds timeout);

  int port() const { return port_; }
  const std::string& address() const { return address_; }
  // Why the worker is unhealthy (unhealthy_after_failures tasks in a row failed); empty while it
  // is healthy. It stays unhealthy until restarted.
  std::string unhealthy_reason() const;

  // The Worker RPC (the gRPC adapter calls it): a serialized GetElementsResponse.
  absl::Status GetElements(const GetElementsRequest& req, grpc::ByteBuffer* resp);

 private:
  struct Buffered {
    ElementData meta;  // every field but the payload
    // The element_codec encoding (empty: no payload). It shares the element's tensor buffers, so
    // a buffered element may keep a larger read buffer alive than its size says.
    EncodedElement payload;
    // Cross-trainer cache: the element's one copy in the job's shared-memory segment, which
    // every trainer on this host gets a reference to (null for other jobs' elements).
    std::shared_ptr<ShmSharedCopy> shared;
  };
  // What one consumer reads from this worker's task: a stream of elements with indices
  // first_index, first_index + 1, ... (GetElements hands them out and drops those received).
  struct Stream {
    std::deque<Buffered> buffer;
    int64_t first_index = 0;
    int64_t next_index = 0;       // given to the next element appended
    int64_t cursor = 0;           // the next index to hand out
    std::vector<int64_t> splits;  // splits handed (in part) to this consumer
    int requests = 0;             // GetElements calls of this consumer in progress
  };
  // Cross-trainer cache: one trainer's read position on this worker's log, and the split it is
  // recomputing (it fell behind the window).
  struct Trainer {
    std::string id;
    int64_t cursor = 0;    // the next log index to hand out (guarded by the worker's mu_)
    int64_t received = 0;  // its requests' next_index: it holds every element below (mu_)
    // Held for the whole of one of this trainer's requests, so that recomputing (outside mu_)
    // is never done twice at once; guards the fields below.
    absl::Mutex fetch_mu;
    int64_t rc_first = -1;  // the log index of the first element of the split recomputed
    int64_t rc_next = 0;    // the log index of the element rc_it yields next
    std::unique_ptr<data::SingleSplit> rc_provider;
    std::unique_ptr<data::PipelineIterator> rc_it;
  };
  // Cross-trainer cache: where one split lies in the task's log.
  struct LogSplit {
    int64_t split_id = 0;
    int64_t epoch = 0;
    int64_t begin = 0;
    int64_t end = 0;
    int64_t first_index = 0;                  // log index of its first element
    int64_t count = 0;                        // elements in the log so far
    bool complete = false;                    // its last element is in the log
    bool empty = false;                       // it produced no element: one end-of-split marker
    ElementData MetaAt(int64_t index) const;  // the element's fields but its payload
  };
  // Elements of a split produced before a consumer asked for it.
  struct UnassignedSplit {
    std::deque<Buffered> elements;
  };
  struct Task {
    int64_t job_id = 0;
    std::string spec;
    Sharding sharding = Sharding::kDynamic;
    Compression compression = Compression::kNone;
    int64_t num_epochs = 1;   // sharding off: the epochs to run; dynamic: each split names its own
    int64_t first_epoch = 0;  // sharding off: the first epoch to run
    int64_t num_consumers = 0;  // coordinated reads (0: off)
    bool pad_rounds = false;    // coordinated: pad a split's incomplete round (else drop it)
    bool needs_size = false;    // report the source's size in GetSplit
    // Cross-trainer cache: one log of every element produced, read whole by every trainer
    // (each at its own cursor); the window holds its indices [window_first, log_end). Elements
    // below `fastest` (the furthest cursor) leave the window once it exceeds cache_bytes;
    // `buffered_bytes` then counts the window's elements no trainer has read yet.
    bool cross_trainer = false;
    bool skip_behind = false;                        // on_fall_behind skip (else recompute)
    std::shared_ptr<const data::Pipeline> pipeline;  // for recomputing; set before producing
    std::map<int64_t, LogSplit> log_splits;          // by first index
    std::deque<Buffered> window;
    int64_t window_first = 0;
    int64_t window_bytes = 0;
    int64_t log_end = 0;
    int64_t fastest = 0;
    std::map<int64_t, std::shared_ptr<Trainer>> trainers;  // by client id
    // The one segment of every trainer on this host (also in `shm` under each one's client id),
    // made by the first; replaced when a trainer that used it is removed (its references can
    // never be released). Window elements below `shm_kept_from` (every trainer here has
    // received them) no longer keep their copy in it for trainers that ask later.
    std::shared_ptr<ShmSegment> trainers_shm;
    int64_t shm_kept_from = 0;
    Counter* cache_hits = nullptr;
    Counter* cache_misses = nullptr;
    Counter* cache_recomputed = nullptr;
    Counter* cache_skipped = nullptr;
    // Streams by client id, or by consumer index for coordinated jobs. Without coordination each
    // split goes whole to the first consumer that asks while its stream is empty (first come,
    // first served); until then its elements wait in `unassigned`.
    std::map<int64_t, Stream> streams;
    std::map<int64_t, UnassignedSplit> unassigned;  // by split id
    std::map<int64_t, int64_t> owner;   // split id -> the client whose stream gets its elements
    std::set<int64_t> dropped_splits;   // their consumer was removed: discard their elements
    std::set<int64_t> removed_clients;  // already handled
    // Shared-memory segments by client id (dropped with the client, the task, or a request
    // without shm_host).
    std::map<int64_t, std::shared_ptr<ShmSegment>> shm;
    std::set<int64_t> departed;     // coordinated: consumer indices that left
    std::vector<int64_t> orphaned;  // splits to report to the dispatcher
    int64_t buffered_bytes = 0;     // in every stream and in `unassigned`
    bool producer_done = false;     // the task thread has returned
    // Its series in MetricsRegistry::Default() (labelled with the job), set before it starts.
    Counter* produced_elements = nullptr;
    Counter* produced_bytes = nullptr;
    Counter* busy_seconds = nullptr;
    Counter* splits_done = nullptr;
    bool cancelled = false;
    std::thread thread;
  };

  // The deadline of an RPC to the dispatcher (a heartbeat's adds the heartbeat interval).
  static constexpr std::chrono::seconds kRpcTimeout{5};

  explicit Worker(const WorkerOptions& options);
  void HeartbeatLoop();
  void RunTask(Task* task);
  absl::Status RunDynamic(Task* task);
  absl::Status RunWholePipeline(Task* task);
  // A snapshot job's split (docs/protocol.md, "Snapshots"): writes its elements as one part at
  // `url` and returns the element naming it (nullopt: the split yielded nothing, no part).
  absl::StatusOr<std::optional<data::Element>> WriteSnapshotPart(Task* task, const std::string& url,
                                                                 const GetSplitResponse& split,
                                                                 data::PipelineIterator* it);
  // Appends an element to the stream of the consumer its split goes to (or to `unassigned`),
  // waiting while the task's buffers are full. False if the task was cancelled or the worker is
  // stopping. `stream` >= 0 names the stream (coordinated rounds); -1: by the split's owner.
  bool Push(Task* task, ElementData meta, EncodedElement payload, int64_t stream = -1);
  // Coordinated reads: the split's elements dealt out in rounds, one to each consumer.
  bool PushRounds(Task* task, const GetSplitResponse& split,
                  std::vector<std::pair<EncodedElement, int64_t>> elements);
  // Counts time a task waited on its pipeline (its metric and the worker's total).
  void AddBusy(Task* task, std::chrono::steady_clock::duration d);
  void Append(Task* task, Stream* stream, Buffered b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cross-trainer cache: appends to the task's log; moves `fastest` on (dropping what the window
  // no longer keeps).
  void AppendToLog(Task* task, Buffered b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceFastest(Task* task, int64_t cursor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GetElements of a cross-trainer cache job: from the window, or recomputed / skipped.
  absl::Status GetTrainerElements(std::shared_ptr<Task> task, const GetElementsRequest& req,
                                  grpc::ByteBuffer* resp);
  // The end of every GetElements: counts what the reply sends (stoker_worker_sent_elements_total
  // and stoker_worker_sent_bytes_total of the request's job and client; end-of-split markers and
  // skipped places are not elements) and serializes it (elements_response.h): `out` in order,
  // the fields set in `fields` (null: none), and the end of the stream.
  // With `shm`, each payload goes into a slot of it when one is free (else inline); an element
  // with a `shared` copy there gets a reference to that copy.
  static grpc::ByteBuffer FinishResponse(const GetElementsRequest& req,
                                         const std::vector<Buffered>& out,
                                         const GetElementsResponse* fields, bool end_of_stream,
                                         int64_t stream_end,
                                         const std::shared_ptr<ShmSegment>& shm);
  // The request's client's segment (made on its first request from this host; a cross-trainer
  // job's trainers share one), after applying its releases; null when the request does not ask
  // for shared memory or it is off.
  std::shared_ptr<ShmSegment> SharedMemoryFor(Task* task, const GetElementsRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `client`'s segment. The trainers' shared one is replaced (the next request of each
  // trainer gets a new one): the client may still read what it holds there, so its references
  // are never released, and they would keep the ring from reusing its space.
  void ForgetSharedMemory(Task* task, int64_t client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FCFS: hands `stream` the next unassigned split, if any.
  bool AssignSplit(Task* task, int64_t client, Stream* stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the streams of consumers the dispatcher removed; their splits become `orphaned`.
  void DropRemovedClients(Task* task, const stoker::service::Task& listed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the tasks' buffered bytes at each /metrics scrape.
  void CollectMetrics(MetricsWriter& w);
  bool Stopped(Task* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || task->cancelled;
  }

  const WorkerOptions options_;
  int port_ = 0;
  int64_t metrics_collector_ = 0;  // id in MetricsRegistry::Default(); 0: none
  std::string address_;
  std::shared_ptr<const Security> security_;
  std::unique_ptr<DispatcherService::Stub> dispatcher_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<GrpcServer> server_;
  std::thread heartbeat_;

  mutable absl::Mutex mu_;
  // Shared: a GetElements call waiting on a task keeps it alive if the task is removed meanwhile.
  std::map<int64_t, std::shared_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);
  int64_t worker_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Failed tasks not yet reported (job id -> error): one goes in each heartbeat until the
  // dispatcher has answered a heartbeat that carried it.
  std::map<int64_t, std::string> failures_ ABSL_GUARDED_BY(mu_);
  int consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::string unhealthy_ ABSL_GUARDED_BY(mu_);
  // Load reported in every heartbeat (the autoscaler's input): elements produced and time spent
  // waiting on pipelines, over every task since start.
  int64_t produced_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> busy_ns_{0};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool shm_failed_ ABSL_GUARDED_BY(mu_) = false;  // a segment could not be made: logged, off
  bool draining_ ABSL_GUARDED_BY(mu_) = false;    // no new splits
  bool heartbeats_stopped_ ABSL_GUARDED_BY(mu_) = false;  // Drain ended the heartbeat loop
  // The last heartbeat failed for want of a dispatcher (unreachable, or it went away mid-call).
  // A drain then gives up waiting for consumers: their splits cannot be acknowledged anyway,
  // and the restarted dispatcher leases them again.
  bool dispatcher_unreachable_ ABSL_GUARDED_BY(mu_) = false;
  // The heartbeat in flight, so that Drain can cancel it rather than wait for its long poll.
  grpc::ClientContext* heartbeat_call_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A drain that stops waiting: draining with the dispatcher unreachable.
  bool Abandoning() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return draining_ && dispatcher_unreachable_;
  }
};

}  // namespace stoker::service
