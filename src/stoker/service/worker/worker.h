// A worker of the disaggregated service (docs/protocol.md; glossary in dispatcher/dispatcher.h).
//
// It registers with the dispatcher and heartbeats every heartbeat_interval; the reply lists the
// tasks it should run. For each task it builds the job's pipeline and, with dynamic sharding, asks
// the dispatcher for splits sized so that one takes about split_target to process, runs each split
// through a fresh pipeline iterator, and appends the elements, tagged (split, sequence, last), to
// the task's buffer, encoded (and compressed if the job says so) once. With sharding off it runs
// the whole pipeline. The buffer is bounded by buffer_bytes: production waits while it is full.
// Clients read it with GetElements: a request names the first index the client has not received
// (everything before it is dropped then, never earlier, so nothing is lost with a response) and
// gets the elements after the client's send cursor, so several requests can be in flight; a
// `restart` request moves the cursor back. Replies reference the buffered payloads without
// copying them (elements_response.h).
//
// The heartbeat is a long poll: the dispatcher holds it until the task list changes (or the
// interval passes), so a new job starts on every worker within milliseconds.
//
// Thread safety: all public methods are thread-safe. One mutex; no lock is held across an RPC.
#pragma once

#include <grpcpp/server.h>
#include <grpcpp/support/byte_buffer.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/service.grpc.pb.h"
#include "stoker/service.pb.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/common/grpc_server.h"

namespace stoker::service {

struct WorkerOptions {
  std::string dispatcher_address;  // host:port
  int port = 0;                    // 0: any free port
  std::string host = "127.0.0.1";  // the host clients reach this worker at
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds split_target{100};  // processing time a split is sized for
  int64_t buffer_bytes = int64_t{256} << 20;    // per task, of encoded elements
  int threads = 0;                              // pipeline threads; 0: the spec's setting
  // The only folders plugin libraries named in clients' specs are loaded from (--plugin-dir);
  // none by default, so no plugin (data::PluginPolicy, docs/security.md).
  std::vector<std::string> plugin_dirs;
};

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Start(const WorkerOptions& options);
  ~Worker();  // stops serving, cancels tasks and joins every thread

  // A graceful stop (scale-down): asks for no more splits, finishes the ones it runs, waits until
  // clients have received every buffered element (or `timeout` passes), then tells the dispatcher
  // it leaves, so that splits no consumer acknowledged are leased again at once. Tasks with
  // sharding off are abandoned (their stream would be cut short). Call it once, before destruction.
  void Drain(std::chrono::milliseconds timeout);

  int port() const { return port_; }
  const std::string& address() const { return address_; }

  // The Worker RPC (the gRPC adapter calls it): a serialized GetElementsResponse.
  absl::Status GetElements(const GetElementsRequest& req, grpc::ByteBuffer* resp);

 private:
  struct Buffered {
    ElementData meta;  // every field but the payload
    // The element_codec encoding (empty: no payload). It shares the element's tensor buffers, so
    // a buffered element may keep a larger read buffer alive than its size says.
    EncodedElement payload;
  };
  struct Task {
    int64_t job_id = 0;
    std::string spec;
    std::string sharding;
    Compression compression = Compression::kNone;
    int64_t num_epochs = 1;  // sharding off: the epochs to run; dynamic: each split names its own
    std::deque<Buffered> buffer;  // indices first_index, first_index + 1, ...
    int64_t first_index = 0;
    int64_t next_index = 0;  // given to the next element produced
    int64_t buffered_bytes = 0;
    std::map<int64_t, int64_t> cursors;  // client id -> the next index to hand it
    bool producer_done = false;          // the task thread has returned
    bool cancelled = false;
    std::thread thread;
  };

  explicit Worker(const WorkerOptions& options);
  void HeartbeatLoop();
  void RunTask(Task* task);
  absl::Status RunDynamic(Task* task);
  absl::Status RunWholePipeline(Task* task);
  // Appends an element to the task's buffer, waiting while the buffer is full. False if the task
  // was cancelled or the worker is stopping.
  bool Push(Task* task, ElementData meta, const data::Element* element);
  bool Stopped(Task* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || task->cancelled;
  }

  const WorkerOptions options_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<DispatcherService::Stub> dispatcher_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<GrpcServer> server_;
  std::thread heartbeat_;

  absl::Mutex mu_;
  // Shared: a GetElements call waiting on a task keeps it alive if the task is removed meanwhile.
  std::map<int64_t, std::shared_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);
  int64_t worker_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Failed tasks not yet reported (job id -> error): one goes in each heartbeat until the
  // dispatcher has answered a heartbeat that carried it.
  std::map<int64_t, std::string> failures_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;            // no new splits
  bool heartbeats_stopped_ ABSL_GUARDED_BY(mu_) = false;  // Drain ended the heartbeat loop
};

}  // namespace stoker::service
