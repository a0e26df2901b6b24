// The worker's gRPC adapter (as tf.data separates a service's logic from its grpc_*_impl): a
// grpc::Service with the one WorkerService RPC, GetElements, which checks the client token
// (common/security.h) and then forwards the request to Worker::GetElements (worker.h), mapping its
// absl::Status onto a grpc::Status. GetElements is registered by hand with a ByteBuffer response,
// so that the reply the worker serializes itself, referencing its buffered payloads
// (elements_response.h), goes out without a copy. It holds no state of its own.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "stoker/service/common/security.h"
#include "stoker/service/worker/worker.h"

namespace stoker::service {

// The service to register with the gRPC server. `worker` and `security` are not owned and must
// outlive it. Thread-safe as the Worker is (gRPC calls it from its own threads).
std::unique_ptr<grpc::Service> NewWorkerGrpcService(Worker* worker, const Security* security);

}  // namespace stoker::service
