// absl::Status <-> grpc::Status (the codes map 1:1), RPC deadlines, and retries (IsTransient,
// Backoff).
// Thread safety: free functions without shared state.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <string_view>

#include "absl/status/status.h"
#include "stoker/core/strings.h"

namespace stoker::service {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// `what` names the call and the peer, e.g. "GetSplit to dispatcher 127.0.0.1:5000".
inline absl::Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      StrCat(what, ": ", s.error_message()));
}

inline void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

// The failures a retry may heal: nothing answered (yet), or not in time. Every other code is the
// peer's answer, which asking again would not change.
inline bool IsTransient(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// The waits between the attempts of one retry loop: `initial`, then doubling up to `max`; Reset
// after a success. Not thread-safe (one per loop, or guarded with what it retries).
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : initial_(initial), max_(max), next_(initial) {}
  // The wait before the next attempt, without using it up.
  std::chrono::milliseconds peek() const { return next_; }
  // The wait before the next attempt; the one after is twice as long (at most `max`).
  std::chrono::milliseconds Next() {
    const std::chrono::milliseconds wait = next_;
    next_ = std::min(next_ * 2, max_);
    return wait;
  }
  void Reset() { next_ = initial_; }

 private:
  std::chrono::milliseconds initial_, max_, next_;
};

// The arguments of every channel the service opens: gRPC's own reconnect back-off never grows
// past a second, so that a restarted dispatcher or worker is found again quickly, and messages
// of any size. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is, despite its name, the least time gRPC gives
// one connection attempt (TCP and HTTP/2 handshake) before it gives up on it; it stays at
// gRPC's 20 s: at 100 ms a busy peer (or a busy machine) that took longer than the back-off to
// answer a handshake was never reached ("connection attempt timed out before receiving SETTINGS
// frame", seen in the fault soak at load 20).
inline grpc::ChannelArguments ServiceChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetMaxReceiveMessageSize(-1);
  return args;
}

// A plaintext channel without a token (tests; the service's own channels come from
// Security::MakeChannel).
inline std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   ServiceChannelArguments());
}

}  // namespace stoker::service
