// The service client's job and its heartbeats: the dispatcher's address, ServiceClient::Open
// (checks the options, splits off a trailing to_device, fingerprints the spec, restores a
// checkpoint token, creates or joins the job with bounded retries), the destructor that leaves
// the job, the thread-safe accessors, and HeartbeatLoop (learns the workers and the job's
// parameters, acknowledges delivered splits, starts the fetch threads). Fetching from workers is
// in client_fetch.cc, ordering and acknowledging elements in client_delivery.cc, checkpoints in
// client_checkpoint.cc.
#include "stoker/service/client/client.h"

#include <grpcpp/grpcpp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/random.h"
#include "stoker/data/to_device.h"
#include "stoker/service/client/checkpoint.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/common/modes_proto.h"
#include "stoker/service/common/net_util.h"

namespace stoker::service {
namespace {
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double Seconds(std::chrono::milliseconds d) { return d.count() / 1000.0; }

// The batch size when every batch holds `size` consecutive samples of the epoch's order: ops that
// keep the count (their declared traits, op_registry.h) and one batch op without drop_remainder;
// nothing that drops, groups, takes, skips or repeats. 0 otherwise.
int64_t PositionBatch(const json& spec) {
  data::RegisterBuiltinOps();
  int64_t batch = 0;
  if (!spec.contains("ops") || !spec["ops"].is_array()) return 0;
  for (const json& op : spec["ops"]) {
    const data::CountEffect effect = data::CountEffectOf(op);
    if (effect == data::CountEffect::kKeeps) continue;
    if (effect == data::CountEffect::kBatches && batch == 0 && op.value("op", "") == "batch" &&
        op.contains("size") && op["size"].is_number_integer() &&
        !op.value("drop_remainder", false)) {
      batch = std::max<int64_t>(1, op["size"].get<int64_t>());
      continue;
    }
    return 0;
  }
  return batch;
}
}  // namespace

absl::StatusOr<std::string> NormalizeDispatcherAddress(std::string_view address) {
  std::string_view a = address;
  if (a.starts_with("grpc://")) a.remove_prefix(7);
  while (!a.empty() && a.back() == '/') a.remove_suffix(1);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("dispatcher address '", address, "': ", why,
                                             "; expected HOST:PORT or grpc://HOST:PORT, e.g. "
                                             "127.0.0.1:5000"));
  };
  if (a.empty()) return bad("empty");
  if (a.find("://") != std::string_view::npos) return bad("only the grpc:// scheme is known");
  size_t colon = a.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string_view host = a.substr(0, colon), port = a.substr(colon + 1);
  if (host.empty()) return bad("no host");
  int value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 ||
      value > 65535)
    return bad(StrCat("port '", port, "' is not a number 1 .. 65535"));
  return std::string(a);
}

namespace {

// The last part of a path ("/usr/bin/python3" -> "python3").
std::string BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// This process's program as people know it: the script of `python3 [options] script.py`, the
// module of `python3 -m module`, else the executable's name.
std::string ThisProgram() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  if (argv.empty()) return "?";
  const std::string exe = BaseName(argv[0]);
  if (!exe.starts_with("python")) return exe;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-m" && i + 1 < argv.size()) return StrCat(exe, " -m ", argv[i + 1]);
    if (a == "-c") return StrCat(exe, " -c");
    if (a == "-W" || a == "-X") {  // options with an argument
      ++i;
      continue;
    }
    if (a.starts_with("-")) continue;
    return BaseName(a);
  }
  return exe;
}

}  // namespace

std::string DefaultDisplayName(std::string_view program) {
  std::string user;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr)
    user = pw->pw_name;
  if (user.empty()) {
    const char* env = std::getenv("USER");
    user = env != nullptr && *env != '\0' ? env : StrCat("uid", ::geteuid());
  }
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
    std::snprintf(host, sizeof(host), "?");
  return StrCat(user, "@", host, ":", program.empty() ? ThisProgram() : std::string(program));
}

namespace {

// What the options say of themselves (before anything is sent).
absl::Status CheckOptions(const ServiceClientOptions& options) {
  RETURN_IF_ERROR(CheckMode(options.sharding));  // C++ callers may cast any number to a mode
  RETURN_IF_ERROR(CheckMode(options.compression));
  RETURN_IF_ERROR(CheckMode(options.partial_round));
  RETURN_IF_ERROR(CheckMode(options.on_fall_behind));
  if (options.requests_per_worker < 1)
    return absl::InvalidArgumentError("requests_per_worker must be at least 1");
  if (options.num_consumers < 0 ||
      (options.num_consumers > 0 &&
       (options.consumer_index < 0 || options.consumer_index >= options.num_consumers)))
    return absl::InvalidArgumentError(StrCat("consumer_index ", options.consumer_index,
                                             " is not 0 .. num_consumers - 1 (num_consumers ",
                                             options.num_consumers, ")"));
  if (options.first_epoch < 0) return absl::InvalidArgumentError("first_epoch must be >= 0");
  if (options.cross_trainer_cache &&
      (options.job_name.empty() || options.trainer_id.empty() || !options.resume.empty()))
    return absl::InvalidArgumentError(
        "a cross-trainer cache needs a job_name (shared by the trainers) and a trainer_id for "
        "each trainer, and cannot resume from a checkpoint (a trainer joining the running job "
        "reads it from its start)");
  return absl::OkStatus();
}

// The trainer's spec split in two: what the workers run, and a trailing to_device, which this
// client applies to what it receives (a build without CUDA refuses the op here). Parsed only:
// building the pipeline would open its data, which only the workers need to reach (they report a
// spec they cannot run as the job's error).
struct SplitSpec {
  json workers_spec;
  std::unique_ptr<data::DeviceStage> device_stage;  // null without to_device
};
absl::StatusOr<SplitSpec> SplitOffDeviceStage(const std::string& spec_json) {
  json full_spec = json::parse(spec_json, nullptr, /*allow_exceptions=*/false);
  if (full_spec.is_discarded() || !full_spec.is_object())
    return absl::InvalidArgumentError("the pipeline spec is not a JSON object");
  const data::DeviceSplit split = data::SplitDeviceOp(full_spec);
  if (split.device_op.is_null()) return SplitSpec{std::move(full_spec), nullptr};
  data::ParamReader p(split.device_op, data::IndexPath("$.ops", split.op_index), "op 'to_device'");
  p.String("op");
  data::ToDeviceOptions device_options = data::ParseToDeviceOptions(p);
  RETURN_IF_ERROR(p.Finish());
  // The op's seed as the in-process pipeline derives it (pipeline seed, op index).
  const json& seed = full_spec.value("seed", json(0));
  const uint64_t op_seed = data::MixSeed(
      {seed.is_number_integer() ? seed.get<uint64_t>() : 0, uint64_t{split.op_index}});
  auto stage = data::DeviceStage::Create(device_options, op_seed);
  if (!stage.ok()) return Annotate(stage.status(), "to_device at the service consumer");
  return SplitSpec{split.host_spec, *std::move(stage)};
}

// options.resume's token, checked against the spec the workers run (`fingerprint` its
// fingerprint); `epochs` narrowed to the token's epoch and those after it. nullopt without one.
absl::StatusOr<std::optional<ServiceCheckpoint>> CheckResume(const ServiceClientOptions& options,
                                                             const json& spec,
                                                             const std::string& fingerprint,
                                                             int64_t* first_epoch,
                                                             int64_t* num_epochs) {
  if (options.resume.empty()) return std::nullopt;
  ASSIGN_OR_RETURN(ServiceCheckpoint token, ParseServiceCheckpoint(options.resume));
  if (options.sharding != Sharding::kDynamic)
    return absl::FailedPreconditionError("resuming from a checkpoint needs dynamic sharding");
  if (options.num_consumers > 0 && PositionBatch(spec) == 0)
    return absl::FailedPreconditionError(
        "resuming a coordinated job needs a spec whose batches are consecutive samples "
        "(per-sample ops and one batch op: no filter, bucket_by_length, take, skip or repeat)");
  if (token.fingerprint != fingerprint) {
    const std::string diff =
        token.spec.is_null() ? std::string() : DescribeSpecDifference(token.spec, spec);
    return absl::InvalidArgumentError(
        StrCat("the checkpoint belongs to another pipeline", diff.empty() ? "" : ": ", diff,
               " (fingerprint ", token.fingerprint, ", this spec's ", fingerprint,
               "); resume with the spec it was taken with (same source, mix, ops, seed and batch "
               "size), or start afresh without the checkpoint"));
  }
  if (token.epoch < *first_epoch || token.epoch >= *first_epoch + *num_epochs)
    return absl::InvalidArgumentError(StrCat("the checkpoint is at epoch ", token.epoch,
                                             ", outside the job's epochs ", *first_epoch, " .. ",
                                             *first_epoch + *num_epochs - 1));
  *num_epochs -= token.epoch - *first_epoch;
  *first_epoch = token.epoch;
  return token;
}

// How long a refused connection is retried: options.wait_for_dispatcher, else
// $STOKER_WAIT_FOR_DISPATCHER (seconds), else 0.
absl::StatusOr<std::chrono::milliseconds> WaitForDispatcher(const ServiceClientOptions& options) {
  if (options.wait_for_dispatcher) return *options.wait_for_dispatcher;
  const char* env = std::getenv("STOKER_WAIT_FOR_DISPATCHER");
  if (env == nullptr || *env == '\0') return std::chrono::milliseconds(0);
  char* end = nullptr;
  const double seconds = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(seconds >= 0) || seconds > 1e7)
    return absl::InvalidArgumentError(
        StrCat("STOKER_WAIT_FOR_DISPATCHER='", env,
               "' is not a number of seconds (how long a refused connection to the dispatcher "
               "is retried)"));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// `name` cut to the dispatcher's bound (200 bytes) without splitting a UTF-8 sequence.
std::string CutDisplayName(std::string name) {
  size_t n = std::min<size_t>(name.size(), 200);
  while (n < name.size() && n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
  name.resize(n);
  return name;
}

}  // namespace

SecurityOptions ClientSecurity(const ConsumerOptions& options) {
  SecurityOptions security;
  security.tls_ca_file = options.tls_ca_file;
  security.tls_cert_file = options.tls_cert_file;
  security.tls_key_file = options.tls_key_file;
  security.token_file = options.token_file;
  return security;
}

void SetClientSecurity(ConsumerOptions* options, const SecurityOptions& security) {
  options->tls_ca_file = security.tls_ca_file;
  options->tls_cert_file = security.tls_cert_file;
  options->tls_key_file = security.tls_key_file;
  options->token_file = security.token_file;
}

absl::StatusOr<std::unique_ptr<ServiceClient>> ServiceClient::Open(
    const ServiceClientOptions& options, const std::string& spec_json) {
  ASSIGN_OR_RETURN(std::string address, NormalizeDispatcherAddress(options.dispatcher_address));
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(SplitSpec split, SplitOffDeviceStage(spec_json));
  const json& spec = split.workers_spec;
  const std::string fingerprint = data::Pipeline::Fingerprint(spec);
  Epochs epochs{options.first_epoch, std::max<int64_t>(1, options.num_epochs)};
  ASSIGN_OR_RETURN(std::optional<ServiceCheckpoint> token,
                   CheckResume(options, spec, fingerprint, &epochs.first, &epochs.count));
  ASSIGN_OR_RETURN(std::chrono::milliseconds wait_refused, WaitForDispatcher(options));

  std::unique_ptr<ServiceClient> c(new ServiceClient(options));
  c->fingerprint_ = fingerprint;
  c->spec_ = spec;
  c->position_batch_ = PositionBatch(spec);
  c->device_stage_ = std::move(split.device_stage);
  c->address_ = address;
  {
    std::random_device random;  // 128 bits: no two consumers of a job pick the same
    char id[33];
    std::snprintf(id, sizeof(id), "%08x%08x%08x%08x", random(), random(), random(), random());
    c->registration_id_ = id;
  }
  c->epoch_ = epochs.first;
  c->first_epoch_ = epochs.first;
  c->num_epochs_ = epochs.count;
  c->epochs_done_ = epochs.first;
  ASSIGN_OR_RETURN(c->security_, Security::Load(ClientSecurity(options)));
  std::shared_ptr<grpc::Channel> channel = c->security_->MakeChannel(address, Caller::kClient);
  c->dispatcher_ = DispatcherService::NewStub(channel);
  const GetOrCreateJobRequest req = c->JobRequest(epochs, token);
  if (token) {
    absl::MutexLock lock(&c->mu_);
    c->RestoreLocked(*token);
  }
  RETURN_IF_ERROR(c->CreateJob(req, *channel, wait_refused));
  {
    absl::MutexLock lock(&c->mu_);
    c->last_heartbeat_ok_ = c->workers_seen_ = c->no_worker_logged_ = Clock::now();
  }
  c->heartbeat_ = StartThread("client-hb", [p = c.get()] { p->HeartbeatLoop(); });
  return c;
}

GetOrCreateJobRequest ServiceClient::JobRequest(Epochs epochs,
                                                const std::optional<ServiceCheckpoint>& token) {
  GetOrCreateJobRequest req;
  req.set_spec_json(spec_.dump());
  req.set_fingerprint(fingerprint_);
  req.set_job_name(options_.job_name);
  SetModes({.sharding = options_.sharding,
            .compression = options_.compression,
            .partial_round = options_.partial_round,
            .on_fall_behind = options_.on_fall_behind},
           &req);
  req.set_num_epochs(epochs.count);
  req.set_first_epoch(epochs.first);
  if (token) {
    // Only what the token's consumer had not delivered runs; its open splits are cut exactly as
    // before, and this client drops the elements of them it had delivered (RestoreLocked).
    req.set_num_samples(token->num_samples);
    req.set_resuming(true);
    req.set_replaces_job(options_.replaces_job);
    for (const ServiceCheckpoint::Piece& p : token->Remaining()) {
      ResumePiece* r = req.add_resume();
      r->set_begin(p.begin);
      r->set_end(p.end);
      r->set_exact(p.exact);
    }
  }
  req.set_num_consumers(options_.num_consumers);
  req.set_deterministic(options_.deterministic && options_.num_consumers == 0 &&
                        options_.sharding == Sharding::kDynamic);
  req.set_cross_trainer_cache(options_.cross_trainer_cache);
  req.set_display_name(
      CutDisplayName(options_.display_name.empty() ? DefaultDisplayName() : options_.display_name));
  req.set_open_ended(options_.open_ended);
  return req;
}

void ServiceClient::RestoreLocked(const ServiceCheckpoint& token) {
  resume_epoch_ = token.epoch;
  resume_samples_ = token.num_samples;
  done_[token.epoch] = token.done;
  for (const auto& o : token.open) {
    std::set<int64_t>& seqs = resumed_open_[{o.begin, o.end}];
    for (const auto& [a, b] : o.delivered)
      for (int64_t q = a; q < b; ++q) seqs.insert(q);
  }
  epoch_elements_ = token.elements;
  epoch_samples_ = token.samples;
}

absl::Status ServiceClient::CreateJob(const GetOrCreateJobRequest& req, grpc::Channel& channel,
                                      std::chrono::milliseconds wait_refused) {
  const auto started = Clock::now();
  const auto deadline = started + std::max(options_.connect_timeout, wait_refused);
  Backoff backoff(std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  // The most telling failure so far ("Connection refused", "DNS resolution failed"): an attempt
  // cut short by its own deadline only says that the handshake was shut down.
  std::string cause;
  // Each attempt is bounded, so a call stuck on a first connection attempt cannot hold up the
  // retries; the bound doubles (1 s, 2 s, 4 s, ...), so a dispatcher that answers slowly (a busy
  // machine, a slow journal sync) is still heard before connect_timeout.
  auto attempt_timeout = std::chrono::milliseconds(1000);
  bool timed_out = false;      // an attempt got no answer within its bound
  int handshake_failures = 0;  // in a row, as DiagnoseUnavailable judged them
  while (true) {
    GetOrCreateJobResponse resp;
    grpc::ClientContext ctx;
    // No wait_for_ready: a refused connection or an unknown host fails the call at once with
    // the cause, which the error below names.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    SetDeadline(&ctx, std::max(std::chrono::milliseconds(1000), std::min(attempt_timeout, left)));
    attempt_timeout *= 2;
    grpc::Status s = dispatcher_->GetOrCreateJob(&ctx, req, &resp);
    if (s.ok()) {
      job_id_ = resp.job_id();
      return absl::OkStatus();
    }
    if (!IsTransient(s)) return FromGrpc(s, StrCat("creating the job at dispatcher ", address_));
    // A TLS or plaintext mismatch (or a refused handshake) does not heal by waiting: say so now.
    // A failed handshake is reported the third time in a row (it may be a connection cut short).
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && handshake_failures < 3) {
      bool certain = true;
      std::string why = DiagnoseUnavailable(address_, *security_, s, &certain);
      handshake_failures = why.empty() ? 0 : handshake_failures + 1;
      if (!why.empty() && (certain || handshake_failures == 3))
        return absl::UnavailableError(
            StrCat("cannot reach the dispatcher at ", address_, ": ", why));
    }
    if (cause.empty() || (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
                          s.error_message().find("shutdown") == std::string::npos))
      cause = s.error_message();
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) timed_out = true;
    // Nothing listens at the address: waiting would not help unless the dispatcher is starting,
    // which the caller says with wait_for_dispatcher.
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
        Clock::now() + backoff.peek() > started + wait_refused && NothingListensAt(address_))
      return absl::UnavailableError(
          StrCat("cannot reach the dispatcher at ", address_,
                 wait_refused.count() > 0 ? StrCat(" within ", Seconds(wait_refused), " s") : "",
                 " (is it running, and is the address right?): ", cause,
                 "; nothing listens there (to wait for a dispatcher that is still starting, set "
                 "STOKER_WAIT_FOR_DISPATCHER=SECONDS or stoker consume --wait-for-dispatcher)"));
    if (Clock::now() + backoff.peek() > deadline)
      return absl::UnavailableError(
          StrCat("cannot reach the dispatcher at ", address_, " within ",
                 Seconds(std::max(options_.connect_timeout, wait_refused)),
                 " s (is it running, and is the address right?): ", cause,
                 timed_out ? "; some attempts got no answer in time (is the dispatcher overloaded?)"
                           : ""));
    // The back-off waits on the channel, not in a sleep: a client has no gRPC server whose
    // threads would poll its sockets, so without a call or a wait in progress gRPC's reconnect
    // attempts only advance on its 5-s backup poller, and a dispatcher that came up (or back)
    // after the first refused attempt was missed for 10 s. Returns early once connected.
    channel.WaitForConnected(std::chrono::system_clock::now() + backoff.Next());
  }
}

ServiceClient::~ServiceClient() {
  std::vector<std::thread> threads;
  int64_t client_id = 0;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    client_id = client_id_;
    CancelLongPollLocked();
  }
  if (heartbeat_.joinable()) heartbeat_.join();  // no new fetch threads after this
  {
    absl::MutexLock lock(&mu_);
    threads.swap(fetch_threads_);
  }
  for (auto& t : threads) t.join();
  if (job_id_ != 0) {
    // Leave at once, so that the dispatcher need not wait out the client timeout (and a job
    // nobody reads any more ends now). Without a client id yet, the registration id names a
    // registration the dispatcher may hold, and an anonymous job nobody joined ends.
    ClientHeartbeatRequest req;
    req.set_job_id(job_id_);
    req.set_client_id(client_id);
    if (client_id == 0) req.set_registration_id(registration_id_);
    req.set_leaving(true);
    req.set_consumer_index(options_.consumer_index);
    {
      absl::MutexLock lock(&mu_);
      for (int64_t s : to_ack_) req.add_completed_splits(s);
    }
    ClientHeartbeatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::chrono::seconds(1));
    (void)dispatcher_->ClientHeartbeat(&ctx, req, &resp);
  }
}

ServiceClientStats ServiceClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int64_t ServiceClient::num_samples() const {
  absl::MutexLock lock(&mu_);
  return num_samples_;
}

int64_t ServiceClient::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void ServiceClient::Cancel() {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = absl::CancelledError("interrupted");
}

absl::Status ServiceClient::WaitForJobInfo(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto known = [&] { return (job_info_ && num_samples_ > 0) || !error_.ok() || finished_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&known), timeout))
    return absl::DeadlineExceededError(
        StrCat("the size of job ", job_id_, " is not known yet: no worker has opened its data"));
  return error_;
}

void ServiceClient::HeartbeatLoop() {
  while (true) {
    ClientHeartbeatRequest req;
    grpc::ClientContext ctx;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      req = HeartbeatRequestLocked();
      if (req.wait_ms() > 0) long_poll_ = &ctx;
    }
    ClientHeartbeatResponse resp;
    SetDeadline(&ctx, std::chrono::seconds(5));
    const auto sent = Clock::now();
    grpc::Status s = dispatcher_->ClientHeartbeat(&ctx, req, &resp);
    // A reply held for wait_ms took part of the interval already.
    const auto held = s.ok() && req.wait_ms() > 0 ? Clock::now() - sent : Clock::duration::zero();
    absl::MutexLock lock(&mu_);
    const bool cut_short = long_poll_cancelled_;  // by HeartbeatNowLocked or the destructor
    long_poll_ = nullptr;
    long_poll_cancelled_ = false;
    const size_t known = fetchers_.size();
    if (s.ok()) {
      ApplyHeartbeatLocked(req, resp);
    } else if (cut_short && s.error_code() == grpc::StatusCode::CANCELLED) {
      continue;  // a long poll this client ended itself: the heartbeat it wants goes out now
    } else {
      HeartbeatFailedLocked(s, Clock::now());
    }
    if (finished_ && to_ack_.empty()) {
      // Nothing more to learn; keep quiet until destruction.
      mu_.Await(absl::Condition(&stopping_));
      return;
    }
    // After a failed heartbeat, wait the whole interval even if GetNext asks for one now.
    if (s.ok()) heartbeat_now_ = false;
    // A reply that named a new worker: the next long poll starts now, so that a second worker
    // joining just after the first (the autoscaler starts several at once) is not learned of one
    // interval later. Each such turn follows a worker that joined, so this cannot spin.
    if (s.ok() && fetchers_.size() > known) continue;
    // A plain heartbeat (it had acknowledgements to send, or was wanted now) is followed by the
    // long poll at once: it is paced by the dispatcher's hold, and a worker that joined meanwhile
    // is learned of now, not an interval later.
    if (s.ok() && req.wait_ms() == 0 && LongPollLocked()) continue;
    auto wake = [&] { return stopping_ || (s.ok() && heartbeat_now_); };
    mu_.AwaitWithTimeout(absl::Condition(&wake),
                         absl::FromChrono(std::max<Clock::duration>(
                             Clock::duration::zero(), options_.heartbeat_interval - held)));
  }
}

void ServiceClient::HeartbeatNowLocked() {
  heartbeat_now_ = true;
  CancelLongPollLocked();
}

void ServiceClient::CancelLongPollLocked() {
  if (long_poll_ == nullptr || long_poll_cancelled_) return;
  long_poll_->TryCancel();
  long_poll_cancelled_ = true;
}

bool ServiceClient::LongPollLocked() const {
  return to_ack_.empty() && !heartbeat_now_ && client_id_ != 0 && !finished_;
}

ClientHeartbeatRequest ServiceClient::HeartbeatRequestLocked() {
  ClientHeartbeatRequest req;
  req.set_job_id(job_id_);
  req.set_consumer_index(options_.consumer_index);
  req.set_trainer_id(options_.trainer_id);
  req.set_client_id(client_id_);
  // Until a reply told this consumer its id, every registration names the same id, so that one
  // the dispatcher holds without this consumer having heard of it (the dispatcher killed after
  // journaling it, or a reply past the deadline) is given back, not refused.
  if (client_id_ == 0) req.set_registration_id(registration_id_);
  req.set_wait_seconds(stats_.wait_seconds);
  req.set_compute_seconds(stats_.between_seconds);
  req.set_delivered_elements(stats_.elements);
  req.set_first_wait_seconds(stats_.first_wait_seconds);
  for (int64_t s : to_ack_) req.add_completed_splits(s);
  if (options_.num_consumers == 0) {  // shared jobs: a re-run of these comes to this client
    for (const auto& [s, progress] : splits_) req.add_held_splits(s);
    for (int64_t s : to_ack_) req.add_held_splits(s);
  }
  for (const auto& [id, f] : fetchers_)
    if (f->ended) req.add_ended_workers(id);
  // Nothing to acknowledge: the dispatcher holds the reply until the job's workers change (or
  // its size, epochs or end), so this consumer fetches from a new worker as soon as it joins, not
  // up to an interval later. A heartbeat wanted now (HeartbeatNowLocked) cancels the hold.
  if (LongPollLocked()) {
    req.set_wait_ms(options_.heartbeat_interval.count());
    for (const auto& [id, f] : fetchers_) req.add_known_workers(id);
  }
  return req;
}

void ServiceClient::ApplyHeartbeatLocked(const ClientHeartbeatRequest& req,
                                         const ClientHeartbeatResponse& resp) {
  const auto now = Clock::now();
  last_heartbeat_ok_ = now;
  client_id_ = resp.client_id();
  job_info_ = true;
  num_samples_ = resp.num_samples();
  first_epoch_ = resp.first_epoch();
  num_epochs_ = std::max<int64_t>(1, resp.num_epochs());
  epochs_done_ = resp.epochs_done();
  if (client_id_ != req.client_id() && epoch_ < first_epoch_) epoch_ = first_epoch_;
  std::set<int64_t> acked(req.completed_splits().begin(), req.completed_splits().end());
  std::erase_if(to_ack_, [&](int64_t id) { return acked.count(id) > 0; });
  UpdateFetchersLocked(resp);
  WatchForWorkersLocked(resp.registered_workers(), now);
  if (!resp.job_error().empty() && error_.ok())
    error_ = absl::FailedPreconditionError(StrCat("job ", job_id_, ": ", resp.job_error()));
  if (resp.job_finished()) finished_ = true;
}

void ServiceClient::UpdateFetchersLocked(const ClientHeartbeatResponse& resp) {
  std::set<int64_t> live;
  for (const WorkerInfo& w : resp.workers()) {
    live.insert(w.worker_id());
    if (fetchers_.count(w.worker_id())) continue;
    auto f = std::make_unique<Fetcher>();
    f->worker_id = w.worker_id();
    f->address = w.address();
    f->stub = WorkerService::NewStub(security_->MakeChannel(w.address(), Caller::kClient));
    fetchers_[w.worker_id()] = std::move(f);
    // Enough threads for requests_per_worker in flight to every worker, up to the cap.
    size_t wanted = std::min<size_t>(
        kMaxFetchThreads, fetchers_.size() * static_cast<size_t>(options_.requests_per_worker));
    while (fetch_threads_.size() < wanted)
      fetch_threads_.push_back(StartThread("client-fetch", [this] { FetchLoop(); }));
  }
  for (auto& [id, f] : fetchers_)
    if (!live.count(id)) f->removed = true;
}

void ServiceClient::WatchForWorkersLocked(int64_t registered_workers, Clock::time_point now) {
  if (registered_workers > 0) {
    workers_seen_ = now;
    return;
  }
  if (finished_) return;
  if (now - no_worker_logged_ >= options_.no_worker_log) {
    SPDLOG_WARN(
        "job {}: waiting for a worker: 0 registered at dispatcher {} (start "
        "`stoker worker --dispatcher {}`)",
        job_id_, address_, address_);
    no_worker_logged_ = now;
  }
  if (options_.no_worker_timeout.count() > 0 && now - workers_seen_ > options_.no_worker_timeout &&
      error_.ok())
    error_ = absl::UnavailableError(StrCat("no worker registered at dispatcher ", address_, " for ",
                                           Seconds(options_.no_worker_timeout),
                                           " s; start workers with `stoker worker "
                                           "--dispatcher ",
                                           address_, "`"));
}

void ServiceClient::HeartbeatFailedLocked(const grpc::Status& s, Clock::time_point now) {
  if (!error_.ok()) return;
  switch (s.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ALREADY_EXISTS:
      // The dispatcher's answer (the job or this consumer is gone, a token it refuses, ...).
      error_ = FromGrpc(s, StrCat("heartbeat to dispatcher ", address_));
      return;
    default:
      if (now - last_heartbeat_ok_ > options_.dispatcher_patience)
        error_ = FromGrpc(s, StrCat("dispatcher ", address_, " unreachable for more than ",
                                    Seconds(options_.dispatcher_patience), " s"));
  }
}

}  // namespace stoker::service
