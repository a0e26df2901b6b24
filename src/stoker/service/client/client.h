// The client of the disaggregated service: one consumer of a job (docs/protocol.md; glossary in
// dispatcher/dispatcher.h).
//
//   ServiceClientOptions o;  o.dispatcher_address = "127.0.0.1:5000";  (ConsumerOptions and more)
//   ASSIGN_OR_RETURN(auto client, ServiceClient::Open(o, spec_json));
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<data::Element> e, client->GetNext());
//     if (!e) break;  // end of data: every split of the job was delivered
//   }
//
// It creates (or joins, by name) the job, heartbeats the dispatcher (learning the workers and
// acknowledging the splits it delivered in full: a split is done once the trainer took all of
// its elements, so a consumer that dies loses nothing it had not handed over), and fetches from
// every worker with up to requests_per_worker requests in flight to each, into a local prefetch
// buffer bounded by prefetch_bytes. The fetch threads are a pool shared by all workers
// (requests_per_worker per worker, at most kMaxFetchThreads), taken in turn, so a client's threads
// stay bounded however many workers register. Elements already held are dropped: the same index of
// one worker's stream (a response resent after one was lost), or the same split and sequence (a
// split re-served by another worker after its first worker was lost).
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
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/data/tensor.h"
#include "stoker/data/to_device.h"
#include "stoker/service.grpc.pb.h"
#include "stoker/service/client/checkpoint.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/common/security.h"
#include "stoker/service/common/shm_files.h"
#include "stoker/service/common/shm_ring.h"

namespace stoker::service {

// The public ConsumerOptions (include/stoker/service/consumer.h: address, job name, modes, epochs,
// coordinated reads, order, resume, prefetch, TLS and token files, connect timeout), plus what only
// the CLI, Python and tests set.
struct ServiceClientOptions : ConsumerOptions {
  // What operators see for the job (status page, /metrics, logs) if it has no job_name; empty:
  // DefaultDisplayName() (`<user>@<host>:<program>`). At most 200 bytes (longer is cut).
  std::string display_name;
  // num_epochs is only a cap: the caller reads as many epochs as it iterates (Python without
  // num_epochs). Operators then see the epochs delivered without a planned total.
  bool open_ended = false;
  Compression compression = Compression::kNone;  // of the job's payloads on the wire
  // With resume: the job the token was taken from, which the dispatcher then ends if it still
  // runs (GetOrCreateJobRequest.replaces_job). 0: none.
  int64_t replaces_job = 0;
  // Cross-trainer cache (needs job_name): every trainer of the job reads all of it, produced
  // once; each names itself with its own trainer_id. on_fall_behind: kRecompute (default: a
  // trainer behind the workers' window gets the elements it missed computed again) or kSkip
  // (tf.data's behaviour: they are skipped, and counted in stats().cache_skipped).
  bool cross_trainer_cache = false;
  std::string trainer_id;
  OnFallBehind on_fall_behind = OnFallBehind::kRecompute;
  // Shared memory (docs/protocol.md): a worker on this host hands payloads over through a segment
  // this process maps, instead of in the reply (the requests, acknowledgements and exactly-once
  // bookkeeping stay the same). false: always in the reply (`stoker consume --no-shm`).
  bool shared_memory = true;
  int requests_per_worker = 2;  // GetElements requests in flight to each worker
  std::chrono::milliseconds heartbeat_interval{200};
  // In order: while the next element is missing, the client fetches past prefetch_bytes up to
  // prefetch_bytes + reorder_bytes (the reorder buffer). Beyond that it only finishes the splits
  // each worker has in progress, plus one small request (1 MiB) every 100 ms to some worker, so
  // that a split re-run after its worker died can still reach a worker whose buffer is full of
  // later splits (docs/protocol.md, "Deterministic order").
  int64_t reorder_bytes = int64_t{256} << 20;
  int64_t request_bytes = int64_t{8} << 20;  // most bytes asked of a worker per request
  // A refused connection (nothing listens at the address) fails Open at once (within a second),
  // unless this is set: a trainer started before its dispatcher, or while it restarts, then
  // retries for this long. nullopt: the environment variable STOKER_WAIT_FOR_DISPATCHER
  // (seconds), else 0. Once the job is open, a dispatcher that goes away is waited for
  // (dispatcher_patience) whatever this says.
  std::optional<std::chrono::milliseconds> wait_for_dispatcher;
  // How long a dispatcher that answered before may stay unreachable before GetNext fails.
  std::chrono::milliseconds dispatcher_patience{60000};
  // With no worker registered: a log line every no_worker_log, and GetNext fails after
  // no_worker_timeout (0: never).
  std::chrono::milliseconds no_worker_log{10000};
  std::chrono::milliseconds no_worker_timeout{0};
};

// A consumer's TLS and token files (ConsumerOptions) as the SecurityOptions of a dialling process,
// and back (the CLI's --tls-ca, --tls-cert, --tls-key and --token-file).
SecurityOptions ClientSecurity(const ConsumerOptions& options);
void SetClientSecurity(ConsumerOptions* options, const SecurityOptions& security);

// The most fetch threads a client runs, however many workers serve the job.
inline constexpr int kMaxFetchThreads = 32;

// Once it has delivered this many elements, a consumer heartbeats at once (not at its next
// interval), so that an autoscaling dispatcher's first look measures its demand that early
// (AutoscalerConfig::first_look_elements).
inline constexpr int64_t kFirstLookElements = 3;

// "grpc://host:port" or "host:port" -> "host:port"; an error naming the address otherwise.
absl::StatusOr<std::string> NormalizeDispatcherAddress(std::string_view address);

// `<user>@<host>:<program>`, what a job without a name is shown as. `program` empty: this
// process's (the script's name for `python3 [-u ...] script.py`, `python -m module`'s module,
// else the executable's name).
std::string DefaultDisplayName(std::string_view program = {});

struct ServiceClientStats {
  int64_t elements = 0;    // delivered
  int64_t bytes = 0;       // payload bytes received (delivered ones)
  int64_t duplicates = 0;  // dropped because already held
  int64_t splits = 0;      // acknowledged as delivered
  // Cross-trainer cache: elements received from a worker's window, computed again for this
  // trainer (it was behind the window), or skipped (on_fall_behind skip: never delivered).
  int64_t cache_hits = 0;
  int64_t cache_recomputed = 0;
  int64_t cache_skipped = 0;
  // Elements (and their payload bytes) received through a worker's shared memory.
  int64_t shm_elements = 0;
  int64_t shm_bytes = 0;
  // Time inside GetNext (the trainer waited for data), and from a GetNext's return to the next
  // call (the trainer's own work): stall ratio = wait / (wait + between).
  double wait_seconds = 0;
  double between_seconds = 0;
  // The part of wait_seconds until the first element arrived; 0 until then.
  double first_wait_seconds = 0;
};

class ServiceClient {
 public:
  // Creates or joins the job. The spec is only parsed (and fingerprinted) here: the workers open
  // its data, so the trainer needs no access to it. Fails within connect_timeout if the
  // dispatcher cannot be reached.
  static absl::StatusOr<std::unique_ptr<ServiceClient>> Open(const ServiceClientOptions& options,
                                                             const std::string& spec_json);
  ~ServiceClient();  // tells the dispatcher it leaves, stops and joins its threads

  // The next element of the current epoch; nullopt at the end of the epoch (then AdvanceEpoch)
  // or of the job. When the spec ends with to_device, the workers run it without that op and the
  // element is moved to this process's GPU here. With a finite `wait`, DeadlineExceeded when
  // nothing came in time (callers that must react to signals poll with it).
  absl::StatusOr<std::optional<data::Element>> GetNext(
      absl::Duration wait = absl::InfiniteDuration());
  // Moves on to the next epoch; false if the job has none. Elements of the epoch left that were
  // not delivered are discarded (and acknowledged) as they arrive.
  bool AdvanceEpoch();
  int64_t epoch() const;  // the epoch GetNext delivers
  // Makes a waiting or later GetNext fail with Cancelled (thread-safe; e.g. from a signal thread).
  void Cancel();

  // A checkpoint token of the current epoch: every position whose elements this consumer
  // delivered (by GetNext), whatever split or worker they came from. Call it from the thread that
  // calls GetNext, between calls. Resuming from it (options.resume) delivers exactly the rest,
  // in the same order in deterministic mode. FailedPrecondition for coordinated jobs or sharding
  // off; Unavailable while the job's size is not known yet (before the first element).
  // Elements can arrive before a heartbeat told the job's size: it then waits for that (one
  // heartbeat, at most 10 s).
  absl::StatusOr<std::string> Checkpoint();
  const std::string& fingerprint() const { return fingerprint_; }

  int64_t job_id() const { return job_id_; }
  // Samples per epoch as a worker counted them (0 until known); WaitForJobInfo waits for it.
  int64_t num_samples() const;
  absl::Status WaitForJobInfo(absl::Duration timeout);
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
    bool restart = false;    // a response was lost: the next request moves the cursor back
    bool mid_split = false;  // the last element received from it was not the last of its split
    int in_flight = 0;       // requests to this worker now
    std::chrono::steady_clock::time_point retry_at;  // after a failed request: not before
    Backoff backoff{std::chrono::milliseconds(20), std::chrono::milliseconds(500)};
    std::shared_ptr<ShmMapping> shm;  // the worker's segment, once a response named one
    bool shm_off = false;             // mapping it failed: payloads in the reply from now on
    bool shm_files_off = false;       // mapping a file it named failed: its segment only
  };
  struct SplitProgress {
    std::set<int64_t> sequences;  // received
    int64_t last = -1;            // sequence of the last element, once seen
    int64_t undelivered = 0;      // received elements with a payload not yet delivered
  };
  // Where a split lies in its epoch, and which of its elements were delivered (for checkpoints).
  struct SplitPlace {
    int64_t epoch = 0;
    int64_t begin = 0;
    int64_t end = 0;
    std::set<int64_t> delivered;  // sequence numbers
  };
  struct Item {
    EncodedElement payload;
    int64_t epoch = 0;
    bool last = false;   // last of its split
    bool empty = false;  // marks the end of a split that gave this consumer nothing
  };

  // The epochs a job runs: first, first + 1, ..., first + count - 1.
  struct Epochs {
    int64_t first = 0;
    int64_t count = 1;
  };
  // Open's steps, in order (client.cc): the job's request from the options (and what a resumed
  // token says), the token's delivered positions restored here, then the job created or joined.
  GetOrCreateJobRequest JobRequest(Epochs epochs, const std::optional<ServiceCheckpoint>& token);
  void RestoreLocked(const ServiceCheckpoint& token) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `req` until the dispatcher answers: refused connections for `wait_refused`, other
  // transient failures for connect_timeout, with a Backoff; a TLS or plaintext mismatch fails at
  // once. Sets job_id_.
  absl::Status CreateJob(const GetOrCreateJobRequest& req, grpc::Channel& channel,
                         std::chrono::milliseconds wait_refused);

  explicit ServiceClient(const ServiceClientOptions& options) : options_(options) {}
  // The next element as the workers sent it.
  absl::StatusOr<std::optional<data::Element>> GetNextHost(absl::Duration wait);
  // The heartbeat thread: HeartbeatRequestLocked, the call, then ApplyHeartbeatLocked (or the
  // failure judged by HeartbeatFailedLocked), every heartbeat_interval or when GetNext asks.
  void HeartbeatLoop();
  // What the dispatcher hears from this consumer: its id (or registration), time, deliveries,
  // splits to acknowledge and held ones, workers whose streams ended.
  ClientHeartbeatRequest HeartbeatRequestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the next heartbeat is a long poll (wait_ms): nothing to acknowledge, none wanted now.
  bool LongPollLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the next heartbeat now: sets heartbeat_now_ and ends a long poll in flight.
  void HeartbeatNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelLongPollLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a heartbeat's reply says: the job's parameters, acknowledged splits, the workers (a
  // fetcher for each new one, fetch threads to match), the job's error or end.
  void ApplyHeartbeatLocked(const ClientHeartbeatRequest& req, const ClientHeartbeatResponse& resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateFetchersLocked(const ClientHeartbeatResponse& resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With no worker registered: logs every no_worker_log, fails after no_worker_timeout.
  void WatchForWorkersLocked(int64_t registered_workers, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failed heartbeat: the dispatcher's refusal fails the consumer at once; no answer only after
  // dispatcher_patience since the last one.
  void HeartbeatFailedLocked(const grpc::Status& s, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One thread of the fetch pool: takes the workers in turn, one request at a time.
  void FetchLoop();
  // The next worker to ask (in turn, with fewer than requests_per_worker requests in flight, not
  // backing off), or null.
  Fetcher* NextFetcher() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // In order with the reorder buffer full: a worker to ask, or null; sets *max_bytes.
  Fetcher* NextFetcherAtCap(int64_t* max_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an element received from `f`; returns false if it is a duplicate.
  // `payload` is the element's bytes (from the reply, or the worker's shared memory and the files
  // it named).
  bool Accept(Fetcher* f, ElementData* d, EncodedElement payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The payload of `d` handed over in shared memory (its slot, and the files its spans name).
  absl::StatusOr<EncodedElement> SharedPayload(Fetcher* f, const GetElementsResponse& resp,
                                               const ElementData& d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One element of `split` was delivered (or discarded): acknowledges the split once it is whole.
  void Delivered(int64_t split) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeAck(int64_t split) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next deliverable item (removing it), or nullopt; sets *epoch_over at the epoch's end.
  std::optional<Item> TakeNext(bool* epoch_over) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ordered() const { return options_.deterministic || options_.num_consumers > 0; }

  const ServiceClientOptions options_;
  std::string address_;      // normalized
  std::string fingerprint_;  // of the spec the workers run
  nlohmann::json spec_;      // the spec the workers run
  // Coordinated checkpoints: the spec's batch size when each batch is `batch` consecutive
  // samples of the order (per-sample ops and one batch op), so that the rounds a consumer
  // delivered of a split are positions; 0 when the spec does not allow it.
  int64_t position_batch_ = 0;
  int64_t job_id_ = 0;
  std::string registration_id_;  // random, sent with every registration (see HeartbeatLoop)
  std::shared_ptr<const Security> security_;
  std::unique_ptr<DispatcherService::Stub> dispatcher_;
  std::thread heartbeat_;
  std::unique_ptr<data::DeviceStage> device_stage_;  // the spec's to_device, or null

  mutable absl::Mutex mu_;
  int64_t client_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::unique_ptr<Fetcher>> fetchers_ ABSL_GUARDED_BY(mu_);  // by worker id
  int64_t last_fetched_ ABSL_GUARDED_BY(mu_) = 0;  // worker id asked last (turns)
  std::vector<std::thread> fetch_threads_ ABSL_GUARDED_BY(mu_);
  // Dynamic sharding: received elements by (split, sequence), the job's global order. Sharding
  // off: payloads in arrival order.
  std::map<std::pair<int64_t, int64_t>, Item> items_ ABSL_GUARDED_BY(mu_);
  std::deque<EncodedElement> fifo_ ABSL_GUARDED_BY(mu_);
  int64_t ready_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // GetNext waits for an element that is not here: fetch past the prefetch budget.
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  // The reorder buffer is full: when the last small request went out, and whether that was logged.
  std::chrono::steady_clock::time_point trickle_at_ ABSL_GUARDED_BY(mu_);
  bool cap_logged_ ABSL_GUARDED_BY(mu_) = false;
  bool shm_logged_ ABSL_GUARDED_BY(mu_) = false;        // a worker's segment could not be mapped
  bool shm_files_logged_ ABSL_GUARDED_BY(mu_) = false;  // nor a file a worker named
  SharedFileMappings shm_files_;                        // files workers named, mapped
  std::pair<int64_t, int64_t> expected_ ABSL_GUARDED_BY(mu_) = {0, 0};  // ordered: next to deliver
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int64_t, SplitProgress> splits_ ABSL_GUARDED_BY(mu_);  // not yet acked
  absl::flat_hash_set<int64_t> complete_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> to_ack_ ABSL_GUARDED_BY(mu_);
  // GetNext is starved while splits wait for acknowledgement (e.g. at the end of the job): the
  // heartbeat goes out now instead of at the next interval. Cleared once that heartbeat is back.
  bool heartbeat_now_ ABSL_GUARDED_BY(mu_) = false;
  // The heartbeat in flight while it is a long poll (wait_ms), owned by the heartbeat thread, so
  // that HeartbeatNowLocked and the destructor can end the hold; whether they did.
  grpc::ClientContext* long_poll_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool long_poll_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool job_info_ ABSL_GUARDED_BY(mu_) = false;  // a heartbeat reply told the job's parameters
  int64_t num_samples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t first_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_epochs_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t epochs_done_ ABSL_GUARDED_BY(mu_) = 0;
  // The heartbeat thread's clocks: the last answered heartbeat, when a worker was last
  // registered (or the client started), the last "waiting for a worker" line.
  std::chrono::steady_clock::time_point last_heartbeat_ok_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point workers_seen_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point no_worker_logged_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ServiceClientStats stats_ ABSL_GUARDED_BY(mu_);
  // Checkpoints: splits with elements here that are not complete, by id; positions of each epoch
  // whose splits were delivered in full; the delivered sequences of the resumed token's open
  // splits (by begin, end of its epoch), dropped when the new job runs them again.
  std::map<int64_t, SplitPlace> places_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> done_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int64_t, int64_t>, std::set<int64_t>> resumed_open_ ABSL_GUARDED_BY(mu_);
  int64_t resume_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t resume_samples_ ABSL_GUARDED_BY(mu_) = 0;  // num_samples in the resumed token
  int64_t epoch_elements_ ABSL_GUARDED_BY(mu_) = 0;  // delivered in epoch_ (with the token's)
  int64_t epoch_samples_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<std::chrono::steady_clock::time_point> last_return_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::service
