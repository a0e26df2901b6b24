// Consumer: reads a pipeline's elements through the disaggregated service (docs/protocol.md):
// the pipeline runs on the service's workers; this process receives its elements.
//
//   stoker::service::ConsumerOptions options;
//   options.dispatcher_address = "127.0.0.1:5000";
//   ASSIGN_OR_RETURN(auto consumer, stoker::service::Consumer::Create(options, spec_json));
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<stoker::data::Element> e, consumer->Next());
//     if (!e) {                                   // the end of an epoch
//       if (!consumer->AdvanceEpoch()) break;     // ... and of the job
//       continue;
//     }
//   }
//
// Create creates the job (or joins it, by name) on the dispatcher; the workers open the data, so
// this process needs no access to it: the spec is only parsed here. Elements are fetched in the
// background from every worker into a bounded prefetch buffer. A split (a run of the epoch's
// samples) counts as delivered once Next has returned all of its elements, so a consumer that
// dies loses nothing it had not handed over, and duplicates (a split re-run after its worker
// died) are dropped. Nothing here exposes gRPC or protobuf types.
//
// Errors: Create fails within connect_timeout if the dispatcher cannot be reached, and at once
// for a spec that is not valid JSON, bad options or unreadable TLS/token files (naming the file).
// Next fails with what the job failed with (e.g. a worker that cannot read the data names the URL)
// or Unavailable once the dispatcher has been unreachable too long.
//
// Thread safety: Next, AdvanceEpoch, Checkpoint and Close are called by one thread at a time (the
// consumer's thread). Cancel, stats, epoch, job_id and fingerprint may be called from any thread
// at any time until the Consumer is destroyed.
//
// Ownership: Create returns the only owner. Destroying the Consumer (or Close) leaves the job and
// joins its background threads; elements already returned by Next are the caller's (their
// Buffers stay valid after the Consumer is gone).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stoker/data/tensor.h"

namespace stoker::service {

// The service's modes. Each is spelled by one table (service/common/modes.cc): ParseMode reads
// the spelling of a flag, a Python argument or a journal entry, ModeName writes it for logs, the
// status page, /metrics and the journal. Their numbers are those of the wire's enums
// (proto/stoker/service.proto), where 0 means "unspecified: the default".
enum class Sharding { kDynamic = 1, kOff = 2 };   // "dynamic" (default) or "off"
enum class PartialRound { kDrop = 1, kPad = 2 };  // coordinated reads: "drop" (default) or "pad"
enum class OnFallBehind { kRecompute = 1, kSkip = 2 };  // "recompute" (default) or "skip"

// "dynamic" -> Sharding::kDynamic, ...; anything else is InvalidArgument naming the mode, the
// value and the allowed values ("unknown sharding 'x': use 'dynamic' or 'off'"). Instantiated for
// Sharding, PartialRound, OnFallBehind and Compression (service/common/element_codec.h).
template <typename Mode>
absl::StatusOr<Mode> ParseMode(std::string_view text);
// OK for a value of the enum, else InvalidArgument like ParseMode's (e.g. a number cast to it).
template <typename Mode>
absl::Status CheckMode(Mode mode);
// The mode's name as ParseMode reads it ("sharding", "partial_round", ...) and its spellings.
template <typename Mode>
std::string_view ModeField();
template <typename Mode>
std::vector<std::string_view> ModeNames();
std::string_view ModeName(Sharding mode);
std::string_view ModeName(PartialRound mode);
std::string_view ModeName(OnFallBehind mode);

struct ConsumerOptions {
  std::string dispatcher_address;  // HOST:PORT or grpc://HOST:PORT of `stoker dispatcher`
  // A job name makes a job other consumers can join while it runs (each element goes to one of
  // them; set deterministic = false). Empty: an anonymous job of this consumer's own.
  std::string job_name;
  Sharding sharding = Sharding::kDynamic;  // or kOff: every worker runs the whole pipeline
  int64_t num_epochs = 1;                  // a named job keeps the number it was created with
  int64_t first_epoch = 0;  // the epoch the job starts at (its order and augmentation)
  // Coordinated reads: num_consumers > 0 consumers (e.g. the ranks of a synchronous training job)
  // each get one batch per round, every consumer the same number per epoch; this one is
  // consumer_index (0 .. num_consumers - 1). All of them give the same job_name.
  int64_t num_consumers = 0;
  int64_t consumer_index = 0;
  PartialRound partial_round = PartialRound::kDrop;  // coordinated: drop or pad an incomplete round
  // true: deliver in the job's global order (that of `stoker run`), whatever the number of
  // workers and across workers that die; coordinated jobs always do. false: each element as it
  // arrives (fastest first), which a job shared by several consumers needs.
  bool deterministic = true;
  // A token from Checkpoint() to continue from (empty: start from the beginning). The spec must
  // be the one it was taken with; the number of workers may differ.
  std::string resume;
  // Bytes of received elements held ahead of Next.
  int64_t prefetch_bytes = int64_t{256} << 20;
  // Security (docs/security.md): TLS when tls_ca_file is given (the CA the servers' certificates
  // are verified against); a client certificate and key for mutual TLS; the client token file
  // when the service requires one. Files are read once, by Create.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string token_file;
  // Create fails if the dispatcher cannot be reached for this long (naming the cause).
  std::chrono::milliseconds connect_timeout{10000};
};

// Counters since Create.
struct ConsumerStats {
  int64_t elements = 0;    // returned by Next
  int64_t bytes = 0;       // payload bytes received for them
  int64_t duplicates = 0;  // received twice (e.g. re-run after a worker died) and dropped
  int64_t splits = 0;      // delivered in full and acknowledged to the dispatcher
};

class Consumer {
 public:
  // Creates or joins the job running `spec_json` (a pipeline spec, docs/pipeline.md).
  static absl::StatusOr<std::unique_ptr<Consumer>> Create(const ConsumerOptions& options,
                                                          std::string_view spec_json);
  ~Consumer();  // Close()
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // The next element of the current epoch; nullopt at the end of the epoch (then AdvanceEpoch).
  // Waits for it as long as it takes; the second form returns DeadlineExceeded when nothing came
  // within `wait` (to poll, e.g. for signals). Cancelled after Cancel(), FailedPrecondition after
  // Close().
  absl::StatusOr<std::optional<data::Element>> Next();
  absl::StatusOr<std::optional<data::Element>> Next(std::chrono::milliseconds wait);
  // Moves on to the next epoch; false if the job has none (or after Close). What was left of the
  // epoch is discarded.
  bool AdvanceEpoch();

  // An opaque token (one line of JSON) saying which elements of the current epoch Next returned;
  // ConsumerOptions::resume continues after them, in a new process, on any number of workers.
  // Unavailable before the first element (the job's size is not known yet); FailedPrecondition
  // with sharding "off".
  absl::StatusOr<std::string> Checkpoint();

  // Makes a waiting or later Next fail with Cancelled (e.g. from a signal-handling thread).
  void Cancel();
  // Leaves the job and joins the background threads; idempotent. Next then fails.
  void Close();

  int64_t epoch() const;  // the epoch Next delivers
  int64_t job_id() const;
  // The pipeline spec's fingerprint (hex), as the service registered it.
  std::string fingerprint() const;
  ConsumerStats stats() const;

 private:
  struct Impl;
  explicit Consumer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::service
