#include "stoker/service/client/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/random.h"
#include "stoker/data/to_device.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_util.h"

namespace stoker::service {
namespace {
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
// Far above any split's element count (splits are ~100 ms of work), far below overflow.
constexpr int64_t kMaxSequence = int64_t{1} << 40;
}  // namespace

absl::StatusOr<std::unique_ptr<ServiceClient>> ServiceClient::Open(
    const ServiceClientOptions& options, const std::string& spec_json) {
  if (options.dispatcher_address.empty())
    return absl::InvalidArgumentError("the client needs the dispatcher's HOST:PORT");
  if (options.sharding != "dynamic" && options.sharding != "off")
    return absl::InvalidArgumentError(
        StrCat("unknown sharding '", options.sharding, "': use 'dynamic' or 'off'"));
  RETURN_IF_ERROR(ParseCompression(options.compression).status());
  if (options.requests_per_worker < 1)
    return absl::InvalidArgumentError("requests_per_worker must be at least 1");
  // The whole spec is validated here (a build without CUDA refuses a to_device op); the workers
  // get it without a trailing to_device, which this client applies to what it receives.
  ASSIGN_OR_RETURN(auto full_pipeline, data::Pipeline::FromString(spec_json));
  const data::DeviceSplit split = data::SplitDeviceOp(full_pipeline->spec());
  std::unique_ptr<data::DeviceStage> device_stage;
  if (!split.device_op.is_null()) {
    data::ParamReader p(split.device_op, data::IndexPath("$.ops", split.op_index),
                        "op 'to_device'");
    p.String("op");
    data::ToDeviceOptions device_options = data::ParseToDeviceOptions(p);
    RETURN_IF_ERROR(p.Finish());
    // The op's seed as the in-process pipeline derives it (pipeline seed, op index).
    const json& seed = full_pipeline->spec().value("seed", json(0));
    const uint64_t op_seed = data::MixSeed(
        {seed.is_number_integer() ? seed.get<uint64_t>() : 0, uint64_t{split.op_index}});
    auto stage = data::DeviceStage::Create(device_options, op_seed);
    if (!stage.ok()) return Annotate(stage.status(), "to_device at the service consumer");
    device_stage = *std::move(stage);
  }
  ASSIGN_OR_RETURN(auto pipeline, split.device_op.is_null()
                                      ? absl::StatusOr<std::shared_ptr<const data::Pipeline>>(
                                            std::move(full_pipeline))
                                      : data::Pipeline::FromJson(split.host_spec));
  std::unique_ptr<ServiceClient> c(new ServiceClient(options));
  c->device_stage_ = std::move(device_stage);
  c->dispatcher_ = DispatcherService::NewStub(MakeChannel(options.dispatcher_address));
  GetOrCreateJobRequest req;
  req.set_spec_json(pipeline->spec().dump());
  req.set_fingerprint(pipeline->fingerprint());
  req.set_num_samples(pipeline->source_size().value_or(0));
  req.set_job_name(options.job_name);
  req.set_sharding(options.sharding);
  req.set_compression(options.compression);
  req.set_num_epochs(options.num_epochs);
  auto deadline = Clock::now() + options.dispatcher_patience;
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    GetOrCreateJobResponse resp;
    grpc::ClientContext ctx;
    // Wait for the connection (a dispatcher still starting is found as soon as it listens) but
    // retry each second: without wait_for_ready, a call made while the first connection attempt
    // fails was seen to hang for its whole deadline.
    ctx.set_wait_for_ready(true);
    SetDeadline(&ctx, std::chrono::seconds(1));
    grpc::Status s = c->dispatcher_->GetOrCreateJob(&ctx, req, &resp);
    if (s.ok()) {
      c->job_id_ = resp.job_id();
      break;
    }
    bool transient = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                     s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!transient || Clock::now() > deadline)
      return FromGrpc(s, StrCat("creating the job at dispatcher ", options.dispatcher_address));
    std::this_thread::sleep_for(backoff);  // retry back-off, not test synchronisation
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  c->heartbeat_ = StartThread("client-hb", [p = c.get()] { p->HeartbeatLoop(); });
  return c;
}

ServiceClient::~ServiceClient() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (heartbeat_.joinable()) heartbeat_.join();  // no new fetch threads after this
  {
    absl::MutexLock lock(&mu_);
    threads.swap(fetch_threads_);
  }
  for (auto& t : threads) t.join();
}

ServiceClientStats ServiceClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void ServiceClient::HeartbeatLoop() {
  auto last_ok = Clock::now();
  while (true) {
    ClientHeartbeatRequest req;
    req.set_job_id(job_id_);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      req.set_client_id(client_id_);
      for (int64_t s : to_ack_) req.add_completed_splits(s);
      for (const auto& [id, f] : fetchers_)
        if (f->ended) req.add_ended_workers(id);
    }
    ClientHeartbeatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::chrono::seconds(5));
    grpc::Status s = dispatcher_->ClientHeartbeat(&ctx, req, &resp);
    absl::MutexLock lock(&mu_);
    if (s.ok()) {
      last_ok = Clock::now();
      client_id_ = resp.client_id();
      std::set<int64_t> acked(req.completed_splits().begin(), req.completed_splits().end());
      std::erase_if(to_ack_, [&](int64_t id) { return acked.count(id) > 0; });
      std::set<int64_t> live;
      for (const WorkerInfo& w : resp.workers()) {
        live.insert(w.worker_id());
        if (fetchers_.count(w.worker_id())) continue;
        auto f = std::make_unique<Fetcher>();
        f->worker_id = w.worker_id();
        f->address = w.address();
        f->stub = WorkerService::NewStub(MakeChannel(w.address()));
        fetchers_[w.worker_id()] = std::move(f);
        // Enough threads for requests_per_worker in flight to every worker, up to the cap.
        size_t wanted = std::min<size_t>(
            kMaxFetchThreads, fetchers_.size() * static_cast<size_t>(options_.requests_per_worker));
        while (fetch_threads_.size() < wanted)
          fetch_threads_.push_back(StartThread("client-fetch", [this] { FetchLoop(); }));
      }
      for (auto& [id, f] : fetchers_)
        if (!live.count(id)) f->removed = true;
      if (!resp.job_error().empty())
        error_ = absl::FailedPreconditionError(StrCat("job ", job_id_, ": ", resp.job_error()));
      if (resp.job_finished()) finished_ = true;
    } else if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
               s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      error_ = FromGrpc(s, StrCat("heartbeat to dispatcher ", options_.dispatcher_address));
    } else if (Clock::now() - last_ok > options_.dispatcher_patience) {
      error_ = FromGrpc(
          s, StrCat("dispatcher ", options_.dispatcher_address, " unreachable for too long"));
    }
    if (finished_ && to_ack_.empty()) {
      // Nothing more to learn; keep quiet until destruction.
      mu_.Await(absl::Condition(&stopping_));
      return;
    }
    // After a failed heartbeat, wait the whole interval even if GetNext asks for one now.
    if (s.ok()) heartbeat_now_ = false;
    auto wake = [&] { return stopping_ || (s.ok() && heartbeat_now_); };
    mu_.AwaitWithTimeout(absl::Condition(&wake), absl::FromChrono(options_.heartbeat_interval));
  }
}

bool ServiceClient::Accept(Fetcher* f, const ElementData& d) {
  // Once per index of the worker's stream (a restart may send some again).
  if (d.index() < f->received_below || !f->received_above.insert(d.index()).second) return false;
  while (!f->received_above.empty() && *f->received_above.begin() == f->received_below) {
    f->received_above.erase(f->received_above.begin());
    ++f->received_below;
  }
  if (d.split_id() < 0) return true;  // sharding off: each worker's stream is its own
  // Once per (split, sequence): a split re-run by another worker yields the same elements.
  if (complete_.count(d.split_id())) return false;
  SplitProgress& p = splits_[d.split_id()];
  if (!p.sequences.insert(d.sequence()).second) return false;
  if (d.last()) p.last = d.sequence();
  if (p.last >= 0 && static_cast<int64_t>(p.sequences.size()) == p.last + 1) {
    complete_.insert(d.split_id());
    splits_.erase(d.split_id());
    to_ack_.push_back(d.split_id());
    ++stats_.splits;
  }
  return true;
}

ServiceClient::Fetcher* ServiceClient::NextFetcher() {
  auto now = Clock::now();
  auto usable = [&](const Fetcher& f) {
    return !f.removed && !f.ended && f.in_flight < options_.requests_per_worker &&
           f.retry_at <= now;
  };
  // Workers after the one asked last, then from the start: each gets its turn.
  for (auto it = fetchers_.upper_bound(last_fetched_); it != fetchers_.end(); ++it)
    if (usable(*it->second)) return it->second.get();
  for (auto it = fetchers_.begin(); it != fetchers_.upper_bound(last_fetched_); ++it)
    if (usable(*it->second)) return it->second.get();
  return nullptr;
}

// A thread of the fetch pool. The worker hands each request the elements after the previous
// one's, so requests in flight to one worker do not ask for the same elements.
void ServiceClient::FetchLoop() {
  while (true) {
    Fetcher* f = nullptr;
    GetElementsRequest req;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        if (stopping_) return;
        if (ready_bytes_ < options_.prefetch_bytes && (f = NextFetcher()) != nullptr) break;
        // Nothing to ask now (budget full, every worker busy or backing off): look again soon, or
        // when the consumer takes an element.
        int64_t bytes = ready_bytes_;
        auto changed = [&] { return stopping_ || ready_bytes_ < bytes; };
        mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(10));
      }
      last_fetched_ = f->worker_id;
      ++f->in_flight;
      req.set_client_id(client_id_);
      req.set_next_index(f->received_below);
      req.set_restart(f->restart);
      f->restart = false;
    }
    req.set_job_id(job_id_);
    req.set_max_bytes(options_.request_bytes);
    GetElementsResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::chrono::seconds(10));
    grpc::Status s = f->stub->GetElements(&ctx, req, &resp);
    absl::MutexLock lock(&mu_);
    --f->in_flight;
    if (!s.ok()) {
      // The worker may be gone (the dispatcher will stop listing it and re-lease its splits), or
      // only this response was lost: the next request sends again what was not received.
      f->restart = true;
      f->retry_at = Clock::now() + f->backoff;
      f->backoff = std::min(f->backoff * 2, std::chrono::milliseconds(500));
      continue;
    }
    f->backoff = std::chrono::milliseconds(20);
    for (ElementData& d : *resp.mutable_elements()) {
      // A broken worker must not corrupt the client's bookkeeping (or overflow its arithmetic):
      // the consumer gets a clear error instead.
      const bool off = options_.sharding == "off";
      if (d.index() < 0 || d.sequence() < 0 || d.sequence() > kMaxSequence ||
          (off ? d.split_id() != -1 : d.split_id() < 0)) {
        error_ = absl::DataLossError(
            StrCat("worker ", f->address, " sent a malformed element (index ", d.index(),
                   ", split ", d.split_id(), ", sequence ", d.sequence(), ") for job ", job_id_,
                   "; is it running the same stoker version?"));
        f->removed = true;
        break;
      }
      if (!Accept(f, d)) {
        ++stats_.duplicates;
        continue;
      }
      if (d.empty()) continue;
      ready_bytes_ += static_cast<int64_t>(d.payload().size());
      ready_.push_back(std::move(*d.mutable_payload()));
    }
    if (options_.sharding == "off" && resp.stream_end() >= 0 &&
        f->received_below >= resp.stream_end())
      f->ended = true;
  }
}

absl::StatusOr<std::optional<data::Element>> ServiceClient::GetNext() {
  ASSIGN_OR_RETURN(std::optional<data::Element> e, GetNextHost());
  if (!e || !device_stage_) return e;
  auto on_device = device_stage_->Apply(*std::move(e));
  if (!on_device.ok()) return Annotate(on_device.status(), "to_device at the service consumer");
  return *std::move(on_device);
}

absl::StatusOr<std::optional<data::Element>> ServiceClient::GetNextHost() {
  std::string payload;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [&] {
      return !ready_.empty() || finished_ || !error_.ok() || (!to_ack_.empty() && !heartbeat_now_);
    };
    while (true) {
      mu_.Await(absl::Condition(&ready));
      if (!ready_.empty() || finished_ || !error_.ok()) break;
      heartbeat_now_ = true;  // starved with acknowledgements pending: they may end the job
    }
    if (ready_.empty()) {
      if (!error_.ok()) return error_;
      return std::nullopt;
    }
    payload = std::move(ready_.front());
    ready_.pop_front();
    ready_bytes_ -= static_cast<int64_t>(payload.size());
    ++stats_.elements;
    stats_.bytes += static_cast<int64_t>(payload.size());
  }
  ASSIGN_OR_RETURN(data::Element e, DecodeElement(std::move(payload)));
  return std::optional<data::Element>(std::move(e));
}

}  // namespace stoker::service
