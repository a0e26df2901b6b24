// The worker's gRPC adapter (worker_grpc.h): checks each client's token, then forwards
// GetElements to Worker::GetElements (worker_serve.cc).
#include "stoker/service/worker/worker_grpc.h"

#include "stoker/service/common/grpc_util.h"

namespace stoker::service {
namespace {

// The gRPC adapter. GetElements is registered by hand with a ByteBuffer response (the generated
// service would serialize a protobuf message, copying every payload): the worker builds the
// serialized reply itself, referencing its buffered payloads (elements_response.h).
class GrpcWorker final : public grpc::Service {
 public:
  GrpcWorker(stoker::service::Worker* w, const Security* security) : w_(w), security_(security) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/stoker.service.WorkerService/GetElements", grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<GrpcWorker, GetElementsRequest, grpc::ByteBuffer,
                                             grpc::protobuf::MessageLite, grpc::ByteBuffer>(
            [](GrpcWorker* service, grpc::ServerContext* ctx, const GetElementsRequest* req,
               grpc::ByteBuffer* resp) {
              if (auto s =
                      service->security_->Check(*ctx, Caller::kClient, "worker", "GetElements");
                  !s.ok())
                return s;
              return ToGrpc(service->w_->GetElements(*req, resp));
            },
            this)));
  }

 private:
  stoker::service::Worker* w_;
  const Security* security_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewWorkerGrpcService(Worker* worker, const Security* security) {
  return std::make_unique<GrpcWorker>(worker, security);
}

}  // namespace stoker::service
