#include "stoker/service/common/grpc_server.h"

#include <chrono>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/service/common/net_util.h"

namespace stoker::service {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(grpc::Service* service,
                                                              const std::string& bind, int port,
                                                              std::string_view who,
                                                              const Security& security,
                                                              int max_send_message_bytes) {
  ASSIGN_OR_RETURN(std::string address, ParseBindAddress(bind));
  std::unique_ptr<GrpcServer> s(new GrpcServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(ListenAddress(address, port), security.ServerCredentials(), &s->port_);
  builder.RegisterService(service);
  if (max_send_message_bytes != 0) builder.SetMaxSendMessageSize(max_send_message_bytes);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        StrCat(who, " cannot listen on ", ListenAddress(address, port),
               " (port in use? choose another --port; --bind must be an address of this host)"));
  }
  WarnIfPlaintext(security, who, address, s->port_);
  return s;
}

GrpcServer::~GrpcServer() { Shutdown(); }

void GrpcServer::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
}

}  // namespace stoker::service
