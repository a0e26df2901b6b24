// The service client's fetch pool: which worker to ask next (in turn, within the prefetch budget,
// and past it up to the reorder buffer while GetNext waits in order), and FetchLoop, which sends
// GetElements requests, backs off from failing workers, refuses malformed elements and hands the
// rest to Accept (client_delivery.cc).
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/service/client/client.h"
#include "stoker/service/common/grpc_util.h"

namespace stoker::service {
namespace {
using Clock = std::chrono::steady_clock;
// Far above any split's element count (splits are ~100 ms of work), far below overflow.
constexpr int64_t kMaxSequence = int64_t{1} << 40;
}  // namespace

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

ServiceClient::Fetcher* ServiceClient::NextFetcherAtCap(int64_t* max_bytes) {
  const auto now = Clock::now();
  if (!cap_logged_) {
    cap_logged_ = true;
    SPDLOG_INFO(
        "job {}: the reorder buffer is full ({} MiB held) while split {} is missing; finishing "
        "the splits in progress and asking 1 MiB every 100 ms until it comes",
        job_id_, ready_bytes_ >> 20, expected_.first);
  }
  auto usable = [&](const Fetcher& f) {
    return !f.removed && !f.ended && f.in_flight < options_.requests_per_worker &&
           f.retry_at <= now;
  };
  // A worker in the middle of a split sends the rest of it before anything else: at most one
  // split a worker beyond the cap.
  for (auto& [id, f] : fetchers_)
    if (f->mid_split && usable(*f)) return f.get();
  // Otherwise a small request now and then, in turn: a worker whose buffer is full of later
  // splits leases no split, so the one re-run after its worker died would never be produced.
  if (now - trickle_at_ < std::chrono::milliseconds(100)) return nullptr;
  Fetcher* f = NextFetcher();
  if (f != nullptr) {
    trickle_at_ = now;
    *max_bytes = std::min<int64_t>(options_.request_bytes, int64_t{1} << 20);
  }
  return f;
}

// A thread of the fetch pool. The worker hands each request the elements after the previous
// one's, so requests in flight to one worker do not ask for the same elements.
void ServiceClient::FetchLoop() {
  while (true) {
    Fetcher* f = nullptr;
    GetElementsRequest req;
    int64_t max_bytes = options_.request_bytes;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        if (stopping_) return;
        max_bytes = options_.request_bytes;
        // Past the budget only while GetNext waits for an element that is not here (the next in
        // order may be behind a full budget of later ones), up to the reorder buffer's size.
        const bool room = ready_bytes_ < options_.prefetch_bytes ||
                          (blocked_ && (!ordered() || ready_bytes_ < options_.prefetch_bytes +
                                                                         options_.reorder_bytes));
        if (room && (f = NextFetcher()) != nullptr) break;
        if (!room && blocked_ && (f = NextFetcherAtCap(&max_bytes)) != nullptr) break;
        // Nothing to ask now (budget full, every worker busy or backing off): look again soon, or
        // when the consumer takes an element.
        int64_t bytes = ready_bytes_;
        bool was_blocked = blocked_;
        auto changed = [&] {
          return stopping_ || ready_bytes_ < bytes || (blocked_ && !was_blocked);
        };
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
    req.set_max_bytes(max_bytes);
    req.set_consumer_index(options_.consumer_index);
    req.set_trainer_id(options_.trainer_id);
    std::vector<int64_t> released;  // slots of f's segment this client no longer uses
    {
      absl::MutexLock lock(&mu_);
      if (options_.shared_memory && !f->shm_off) {
        req.set_shm_host(ShmHostIdentity());
        req.set_shm_files(!f->shm_files_off);
      }
      if (f->shm) {
        released = f->shm->TakeReleased();
        req.set_shm_segment(f->shm->id());
        req.mutable_shm_released()->Add(released.begin(), released.end());
      }
    }
    GetElementsResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::chrono::seconds(10));
    grpc::Status s = f->stub->GetElements(&ctx, req, &resp);
    absl::MutexLock lock(&mu_);
    --f->in_flight;
    // Releases the request may not have delivered go again (a second release is ignored).
    if (!s.ok() && !released.empty() && f->shm && f->shm->id() == req.shm_segment())
      f->shm->Requeue(released);
    if (!s.ok()) {
      if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
          s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        // The worker refuses this consumer (removed, a job it cannot share, or this client's
        // token): no retry helps.
        if (error_.ok()) error_ = FromGrpc(s, StrCat("GetElements from worker ", f->address));
        f->removed = true;
        continue;
      }
      // The worker may be gone (the dispatcher will stop listing it and re-lease its splits), or
      // only this response was lost: the next request sends again what was not received.
      f->restart = true;
      f->retry_at = Clock::now() + f->backoff.Next();
      continue;
    }
    f->backoff.Reset();
    stats_.cache_hits += resp.cache_hits();
    stats_.cache_recomputed += resp.cache_recomputed();
    stats_.cache_skipped += resp.cache_skipped();
    if (resp.has_shm() && req.shm_host().empty()) {
      // This request did not offer shared memory: a worker that uses it anyway is broken. (What
      // counts is this request's offer, not f->shm_off now: a request sent while shared memory
      // was on may return after another reply turned it off.)
      error_ = absl::DataLossError(StrCat("worker ", f->address,
                                          " answered with shared memory a request that did not "
                                          "offer it (job ",
                                          job_id_, "); is it running the same stoker version?"));
      f->removed = true;
      continue;
    }
    if (resp.has_shm() && (!f->shm || f->shm->id() != resp.shm().id())) {
      const SharedMemorySegment& seg = resp.shm();
      ShmSegmentInfo info;
      info.id = seg.id();
      info.pid = seg.pid();
      info.fd = seg.fd();
      info.size = static_cast<uint64_t>(seg.size());
      info.inode = static_cast<uint64_t>(seg.inode());
      auto mapped = ShmMapping::Open(info);
      if (!mapped.ok()) {
        // This response's payloads are lost to us: it is dropped, and the next request asks
        // for them again, in the reply.
        if (!shm_logged_)
          SPDLOG_WARN(
              "job {}: cannot map worker {}'s shared memory ({}); its payloads come in "
              "the reply from now on",
              job_id_, f->address, std::string(mapped.status().message()));
        shm_logged_ = true;
        f->shm_off = true;
        f->restart = true;
        continue;
      }
      f->shm = *std::move(mapped);
    }
    if (resp.shm_files_size() > 0 && !req.shm_files()) {
      error_ = absl::DataLossError(StrCat("worker ", f->address,
                                          " named files to map in reply to a request that did not "
                                          "offer to (job ",
                                          job_id_, "); is it running the same stoker version?"));
      f->removed = true;
      continue;
    }
    for (int at = 0; at < resp.elements_size(); ++at) {
      ElementData& d = *resp.mutable_elements(at);
      // A broken worker must not corrupt the client's bookkeeping (or overflow its arithmetic):
      // the consumer gets a clear error instead.
      const bool off = options_.sharding == Sharding::kOff;
      if (d.index() < 0 || d.sequence() < 0 || d.sequence() > kMaxSequence ||
          (off ? d.split_id() != -1 : d.split_id() < 0)) {
        error_ = absl::DataLossError(
            StrCat("worker ", f->address, " sent a malformed element (index ", d.index(),
                   ", split ", d.split_id(), ", sequence ", d.sequence(), ") for job ", job_id_,
                   "; is it running the same stoker version?"));
        f->removed = true;
        break;
      }
      EncodedElement payload;
      if (d.shm_length() > 0) {
        absl::StatusOr<EncodedElement> shared = SharedPayload(f, resp, d);
        if (!shared.ok() && shared.status().code() == absl::StatusCode::kUnavailable) {
          // A file the worker named cannot be mapped here: the rest of this response is dropped
          // (the slots of its elements released; those accepted before keep theirs), and the
          // next request asks for them again, without files.
          if (!shm_files_logged_)
            SPDLOG_WARN(
                "job {}: cannot map a file worker {} named ({}); its payloads come through its "
                "segment from now on",
                job_id_, f->address, std::string(shared.status().message()));
          shm_files_logged_ = true;
          f->shm_files_off = true;
          f->restart = true;
          std::vector<int64_t> slots;
          for (int rest = at; rest < resp.elements_size(); ++rest)
            if (resp.elements(rest).shm_length() > 0)
              slots.push_back(resp.elements(rest).shm_slot());
          f->shm->Requeue(slots);
          break;
        }
        if (!shared.ok()) {
          error_ = absl::DataLossError(StrCat("worker ", f->address, " sent element ", d.index(),
                                              " of job ", job_id_,
                                              " in shared memory: ", shared.status().message()));
          f->removed = true;
          break;
        }
        payload = *std::move(shared);
        ++stats_.shm_elements;
        stats_.shm_bytes += static_cast<int64_t>(payload.size);
      } else if (!d.payload().empty()) {
        const size_t size = d.payload().size();
        payload = {{Buffer::FromString(std::move(*d.mutable_payload()))}, size};
      }
      if (d.split_id() >= 0) f->mid_split = !d.last();
      if (!Accept(f, &d, std::move(payload))) ++stats_.duplicates;
    }
    if (options_.sharding == Sharding::kOff && resp.stream_end() >= 0 &&
        f->received_below >= resp.stream_end())
      f->ended = true;
  }
}

absl::StatusOr<EncodedElement> ServiceClient::SharedPayload(Fetcher* f,
                                                            const GetElementsResponse& resp,
                                                            const ElementData& d) {
  if (d.shm_offset() < 0 || !f->shm || f->shm->id() != resp.shm().id())
    return absl::DataLossError("no shared-memory segment named in the reply");
  ASSIGN_OR_RETURN(Buffer slot, f->shm->Slot(d.shm_slot(), static_cast<uint64_t>(d.shm_offset()),
                                             static_cast<uint64_t>(d.shm_length())));
  EncodedElement payload;
  if (d.shm_spans().empty()) {
    payload.size = slot.size();
    payload.pieces.push_back(std::move(slot));
    return payload;
  }
  uint64_t in_slot = 0;  // the slot's bytes taken by the spans so far
  for (const PayloadSpan& span : d.shm_spans()) {
    if (span.length() <= 0 || span.file() < 0 || span.file() > resp.shm_files_size())
      return absl::DataLossError(StrCat("span of file ", span.file(), ", ", span.length(),
                                        " bytes: not a part of the reply's ", resp.shm_files_size(),
                                        " files or its slot"));
    const uint64_t length = static_cast<uint64_t>(span.length());
    if (span.file() == 0) {
      if (length > slot.size() - in_slot)
        return absl::DataLossError(
            StrCat("spans take more than the slot's ", slot.size(), " bytes"));
      payload.pieces.push_back(slot.Slice(in_slot, length));
      in_slot += length;
    } else {
      if (span.offset() < 0)
        return absl::DataLossError(StrCat("span at offset ", span.offset(), " of a file"));
      ASSIGN_OR_RETURN(Buffer range,
                       shm_files_.Range(resp.shm_files(span.file() - 1),
                                        static_cast<uint64_t>(span.offset()), length));
      payload.pieces.push_back(std::move(range));
    }
    payload.size += length;
  }
  if (in_slot != slot.size())
    return absl::DataLossError(
        StrCat("spans take ", in_slot, " of the slot's ", slot.size(), " bytes"));
  return payload;
}

}  // namespace stoker::service
