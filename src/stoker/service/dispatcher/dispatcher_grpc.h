// The dispatcher's gRPC adapter (as tf.data separates a service's logic from its grpc_*_impl):
// a DispatcherService::Service whose every handler checks the caller's token (worker or client,
// common/security.h) and then forwards the request to the Dispatcher's logic (dispatcher.h),
// mapping its absl::Status onto a grpc::Status. It holds no state of its own.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "stoker/service/common/security.h"
#include "stoker/service/dispatcher/dispatcher.h"

namespace stoker::service {

// The service to register with the gRPC server. `dispatcher` and `security` are not owned and
// must outlive it. Thread-safe as the Dispatcher is (gRPC calls it from its own threads).
std::unique_ptr<grpc::Service> NewDispatcherGrpcService(Dispatcher* dispatcher,
                                                        const Security* security);

}  // namespace stoker::service
