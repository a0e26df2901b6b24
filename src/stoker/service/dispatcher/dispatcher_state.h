// DispatcherState: everything the dispatcher knows that must survive a restart. It changes only
// through Apply(update); the dispatcher journals each update before applying it (journal.h), and a
// restarted dispatcher replays the journal through Apply to reach the same state.
//
// Updates are JSON objects with a "type":
//   register_dataset {fingerprint, spec}            a pipeline spec, keyed by its fingerprint
//   create_job {job_id, name, fingerprint, num_samples, sharding, compression, num_epochs,
//               first_epoch, num_consumers, partial_round, deterministic, resume?,
//               cross_trainer_cache?, on_fall_behind?, display_name?, created?,
//               open_ended?}
//                                                    the modes (sharding, compression,
//                                                    partial_round, on_fall_behind) spelled as
//                                                    ModeName writes them, read by ParseMode;
//                                                    missing: the default
//                                                    num_samples 0: a worker measures it;
//                                                    resume [[begin, end, exact], ...]: only
//                                                    these positions of the first epoch run
//                                                    (a resumed checkpoint; needs num_samples);
//                                                    display_name: what operators see for an
//                                                    unnamed job; created: Unix time in seconds;
//                                                    open_ended: num_epochs is only a cap
//   set_job_size {job_id, num_samples}               a worker's count of an unknown size
//   register_worker {worker_id, address}
//   remove_worker {worker_id}                        missed heartbeats: its leased splits that no
//                                                    consumer acknowledged go back to pending
//   create_split {job_id, split_id, begin, end, worker_id}   a new run of the sample order, leased
//                                                    (positions of all epochs in a row: position
//                                                    p is epoch p / num_samples; never two epochs)
//   lease_split {job_id, split_id, worker_id}        a pending split leased again
//   ack_splits {job_id, split_ids, consumer_index?, client_id?}
//                                                    a consumer delivered these splits in full
//                                                    (coordinated: done once every consumer did;
//                                                    cross-trainer cache: once every live
//                                                    trainer, by client id, did)
//   requeue_splits {job_id, split_ids}               splits handed to a removed consumer: those
//                                                    not acknowledged go back to pending
//   worker_ended {job_id, worker_id}                 sharding off: a worker's stream was consumed
//   job_error {job_id, message}
//   register_client {client_id, job_id, consumer_index?, trainer_id?, registration_id?}
//                                                    cross-trainer cache: a trainer joining
//                                                    reads the job from its start, so splits it
//                                                    lacks are no longer done (those whose
//                                                    worker is gone go back to pending)
//   remove_client {client_id}                        timed out or left (coordinated, and
//                                                    cross-trainer cache: splits that every
//                                                    other consumer acknowledged are done)
//   end_job {job_id, reason}                         collected (no live consumer): its tasks stop
//
// Thread safety: not thread-safe; the dispatcher serialises access with its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/consumer.h"

namespace stoker::service {

class DispatcherState {
 public:
  static constexpr int64_t kMaxEpochs = 1000000;
  static constexpr int64_t kMaxConsumers = 4096;
  struct SplitInfo {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t worker_id = 0;  // the lease holder; 0 while pending
    bool done = false;  // acknowledged by the consumer (coordinated, cross-trainer: by every one)
    // Coordinated: consumer indices that acknowledged it; cross-trainer cache: client ids.
    std::set<int64_t> acked_by;
  };
  // Positions [begin, end) of a resumed job's first epoch still to run; an exact piece is run as
  // one split of exactly these positions.
  struct ResumePiece {
    int64_t begin = 0;
    int64_t end = 0;
    bool exact = false;
  };
  struct Job {
    int64_t id = 0;
    std::string name;  // empty: anonymous
    // What operators see (GetOrCreateJobRequest.display_name): `<user>@<host>:<program>` of the
    // consumer that created the job; empty in journals written before it existed.
    std::string display_name;
    double created = 0;       // Unix time in seconds when it was created; 0: unknown
    bool open_ended = false;  // num_epochs is a cap, not a plan (no total shown)
    // The name operators see: the job name, else the display name, else "job ID".
    std::string label() const;
    std::string fingerprint;
    int64_t num_samples = 0;  // per epoch; 0 until a worker measured it (dynamic sharding)
    int64_t num_epochs = 1;
    int64_t first_epoch = 0;    // position p is epoch first_epoch + p / num_samples
    int64_t num_consumers = 0;  // coordinated reads; 0: off
    PartialRound partial_round = PartialRound::kDrop;
    bool deterministic = false;
    // Every consumer (trainer) reads the whole stream; a split is done once every live trainer
    // acknowledged it. on_fall_behind: the workers' policy.
    bool cross_trainer_cache = false;
    OnFallBehind on_fall_behind = OnFallBehind::kRecompute;
    std::set<int64_t> clients;             // live consumers
    std::vector<int64_t> removed_clients;  // consumers removed (timed out or left), in order
    // Coordinated: consumer indices whose client was removed; their acknowledgements are no
    // longer waited for.
    std::set<int64_t> departed;
    bool ever_had_client = false;
    std::string ended;  // why the job was collected; empty while it runs
    Sharding sharding = Sharding::kDynamic;
    Compression compression = Compression::kNone;  // of element payloads
    // Positions 0 .. num_samples * num_epochs - 1 run through every epoch's sample order in turn;
    // those before next_sample have been handed out.
    int64_t next_sample = 0;
    int64_t positions() const { return num_samples * num_epochs; }
    // A resumed job: the pieces of its first epoch that run (sorted, disjoint); positions of
    // that epoch outside them are skipped.
    bool resumed = false;
    std::vector<ResumePiece> resume;
    // The first position at or after p that runs (positions() if none).
    int64_t SkipGaps(int64_t p) const;
    // The resume piece holding position p, or null (not resumed, or p past the first epoch).
    const ResumePiece* PieceAt(int64_t p) const;
    std::map<int64_t, SplitInfo> splits;
    std::deque<int64_t> pending;  // splits whose lease holder was lost, to lease again
    int64_t done_splits = 0;
    std::set<int64_t> ended_workers;  // sharding off
    std::string error;
    std::map<int64_t, int64_t> last_lease;  // worker id -> the split it was leased last
    // Epochs first_epoch .. epochs_done() - 1 were handed out and acknowledged in full. With
    // a client id (cross-trainer cache): as that trainer sees it, counting the splits it
    // acknowledged.
    int64_t epochs_done(int64_t client_id = 0) const;
    // Cross-trainer cache: every sample handed out and every split acknowledged by this trainer.
    bool FinishedFor(int64_t client_id) const;
  };
  struct Client {
    int64_t id = 0;
    int64_t job_id = 0;
    int64_t consumer_index = 0;
    std::string trainer_id;  // cross-trainer cache jobs
    // The consumer's own id for its registration (ClientHeartbeatRequest.registration_id): a
    // registration it sends again, not having heard the reply, gets this client back.
    std::string registration_id;
  };
  struct Worker {
    int64_t id = 0;
    std::string address;
  };

  absl::Status Apply(const nlohmann::json& update);

  // Dynamic sharding: every sample handed out and every split acknowledged. Sharding off: every
  // live worker's stream was consumed.
  bool JobFinished(const Job& job) const;

  const std::map<std::string, std::string>& datasets() const { return datasets_; }
  const std::map<int64_t, Job>& jobs() const { return jobs_; }
  const std::map<int64_t, Worker>& workers() const { return workers_; }
  const std::map<int64_t, Client>& clients() const { return clients_; }
  const Job* FindJob(int64_t id) const;
  // The running job of that name: one that finished or was collected is never returned, so the
  // name can start a new job.
  std::optional<int64_t> FindJobByName(const std::string& name) const;
  int64_t next_job_id() const { return last_job_id_ + 1; }
  int64_t next_worker_id() const { return last_worker_id_ + 1; }
  int64_t next_client_id() const { return last_client_id_ + 1; }
  int64_t next_split_id(int64_t job_id) const;

 private:
  Job* MutableJob(const nlohmann::json& update);
  std::map<std::string, std::string> datasets_;  // fingerprint -> spec JSON
  std::map<int64_t, Job> jobs_;
  std::map<int64_t, Worker> workers_;  // live (registered, not removed)
  std::map<int64_t, Client> clients_;  // live (registered, not removed)
  int64_t last_job_id_ = 0;
  int64_t last_worker_id_ = 0;
  int64_t last_client_id_ = 0;
};

}  // namespace stoker::service
