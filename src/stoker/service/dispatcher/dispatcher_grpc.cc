// The dispatcher's gRPC adapter (dispatcher_grpc.h): checks each caller's token, then forwards
// the RPC to Dispatcher (dispatcher.cc, dispatcher_leases.cc).
#include "stoker/service/dispatcher/dispatcher_grpc.h"

#include "stoker/service.grpc.pb.h"
#include "stoker/service/common/grpc_util.h"

namespace stoker::service {
namespace {

// The thin gRPC adapter: every call checks the caller's token first, then goes to the
// Dispatcher's logic.
class GrpcDispatcher final : public DispatcherService::Service {
 public:
  GrpcDispatcher(stoker::service::Dispatcher* d, const Security* security)
      : d_(d), security_(security) {}
  grpc::Status GetOrCreateJob(grpc::ServerContext* ctx, const GetOrCreateJobRequest* req,
                              GetOrCreateJobResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kClient, "dispatcher", "GetOrCreateJob"); !s.ok())
      return s;
    return ToGrpc(d_->GetOrCreateJob(*req, resp));
  }
  grpc::Status WorkerHeartbeat(grpc::ServerContext* ctx, const WorkerHeartbeatRequest* req,
                               WorkerHeartbeatResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kWorker, "dispatcher", "WorkerHeartbeat"); !s.ok())
      return s;
    return ToGrpc(d_->WorkerHeartbeat(*req, resp));
  }
  grpc::Status GetSplit(grpc::ServerContext* ctx, const GetSplitRequest* req,
                        GetSplitResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kWorker, "dispatcher", "GetSplit"); !s.ok())
      return s;
    return ToGrpc(d_->GetSplit(*req, resp));
  }
  grpc::Status ClientHeartbeat(grpc::ServerContext* ctx, const ClientHeartbeatRequest* req,
                               ClientHeartbeatResponse* resp) override {
    if (auto s = security_->Check(*ctx, Caller::kClient, "dispatcher", "ClientHeartbeat"); !s.ok())
      return s;
    return ToGrpc(d_->ClientHeartbeat(*req, resp));
  }

 private:
  stoker::service::Dispatcher* d_;
  const Security* security_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewDispatcherGrpcService(Dispatcher* dispatcher,
                                                        const Security* security) {
  return std::make_unique<GrpcDispatcher>(dispatcher, security);
}

}  // namespace stoker::service
