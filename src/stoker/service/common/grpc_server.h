// GrpcServer: the gRPC server runner of the dispatcher and the worker (their RPC logic lives in
// their own classes; this is only the listening socket's lifecycle). It listens on BIND:PORT
// (--bind, default 0.0.0.0: every interface; port 0: any free port) with one service, with TLS or
// plaintext as `security` says (a plaintext server logs a warning once per process), and stops with
// a short grace period for calls in flight. Tokens are checked by the service's handlers
// (Security::Check).
//
// Thread safety: Start, Shutdown and the destructor are called by the owner; port() is
// immutable after Start.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "stoker/service/common/security.h"

namespace stoker::service {

class GrpcServer {
 public:
  // Serves `service` (not owned; it must outlive the server) on `bind` (a numeric address,
  // net_util.h's ParseBindAddress), `port`. `who` names the server in errors ("dispatcher",
  // "worker"). max_send_message_bytes: 0 keeps gRPC's default, -1 is unlimited.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(grpc::Service* service,
                                                           const std::string& bind, int port,
                                                           std::string_view who,
                                                           const Security& security,
                                                           int max_send_message_bytes = 0);
  ~GrpcServer();  // Shutdown()

  // Stops accepting calls and waits up to 200 ms for those in flight, then cancels them
  // (idempotent).
  void Shutdown();
  int port() const { return port_; }

 private:
  GrpcServer() = default;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace stoker::service
