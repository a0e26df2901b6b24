// Actuators of the autoscaler (docs/operations.md, "Autoscaler"): what starts and stops workers.
//
//   local       starts `stoker worker` processes on this host (this same binary) and stops them
//               with SIGTERM, which drains a worker: it finishes its splits, waits until its
//               consumers received them and leaves, so no data is lost.
//   kubernetes  sets the replicas of the workers' Deployment through the API server's `scale`
//               subresource (PATCH .../deployments/NAME/scale), with the pod's service account.
//
// Thread safety: none; one thread (the dispatcher's autoscaler thread) calls an actuator.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::service {

class WorkerActuator {
 public:
  virtual ~WorkerActuator() = default;
  // Asks for `workers` workers in all. Returns once asked (the workers start, or drain and leave,
  // afterwards); an error says why the request could not be made (it is retried at the next
  // decision).
  virtual absl::Status Scale(int workers) = 0;
  // Called once per load interval between decisions (housekeeping, e.g. reaping processes).
  virtual void Tick() {}
  // Workers a Scale could add now without a start-up (the local actuator's standby workers); a
  // job of a pipeline never read starts with them (docs/operations.md, "Autoscaler").
  virtual int standby_workers() const { return 0; }
};

struct LocalActuatorOptions {
  std::string executable = "/proc/self/exe";      // the stoker binary
  std::string dispatcher_address;                 // host:port the workers register with
  std::vector<std::string> worker_flags;          // more `stoker worker` flags (e.g. --threads 1)
  std::chrono::milliseconds stop_timeout{30000};  // on destruction: drain, then SIGKILL
  // Standby workers: processes started (`stoker worker --standby-fd 3`) and serving but not
  // registered, each blocked reading a socket until a scale-up wakes it instead of starting a
  // process, which saves that process's start-up (loading the binary, the servers, the
  // connection: about 25 ms with the shared libraries, docs/operations.md). They cost memory, not
  // CPU. The first are started with the first Scale; a woken one is replaced at the first Tick
  // standby_refill_delay after the last wake, not at once, so that its replacement's start-up does
  // not compete with the workers just woken (nor with their first elements). 0: none.
  int standby = 0;
  std::chrono::milliseconds standby_refill_delay{1000};
};

// Starts and stops `stoker worker` processes on this host. A child started with
// PR_SET_PDEATHSIG gets SIGTERM (a drain) if the dispatcher dies; the destructor drains every
// child (SIGTERM), waits up to stop_timeout, kills what is left and reaps them all. A standby
// process exits when its socket reaches end of file (the destructor closes it, or the dispatcher
// died) or on SIGTERM; one that exited is replaced like a woken one.
class LocalWorkerActuator : public WorkerActuator {
 public:
  explicit LocalWorkerActuator(LocalActuatorOptions options) : options_(std::move(options)) {}
  ~LocalWorkerActuator() override;
  // Wakes standby workers or starts workers, or SIGTERMs the newest ones, so that `workers` run
  // and are not stopping.
  absl::Status Scale(int workers) override;
  // Reaps (and logs) the workers that exited, replaces those that exited on their own, and
  // starts standby workers up to options.standby (see standby_refill_delay).
  void Tick() override;
  int standby_workers() const override { return static_cast<int>(standby_.size()); }
  // Children not yet reaped (running or draining; not standby), and those of them told to stop.
  int children() const { return static_cast<int>(children_.size()); }
  std::vector<pid_t> pids() const;
  std::vector<pid_t> standby_pids() const;

 private:
  struct Child {
    pid_t pid = 0;
    bool stopping = false;
    bool standby = false;  // a standby never woken, told to end
  };
  struct Standby {
    pid_t pid = 0;
    int wake_fd = -1;  // our end of its socket: one byte wakes it, closing it ends it
  };
  void Reap(bool block);
  // Forks and execs `stoker worker`; with `wake_fd`, as a standby whose socket end is stored there.
  absl::StatusOr<pid_t> Spawn(int* wake_fd);
  absl::Status StartOne();
  bool WakeStandby();  // false: none could be woken
  void StartStandby();
  const LocalActuatorOptions options_;
  std::vector<Child> children_;  // oldest first
  std::vector<Standby> standby_;
  int wanted_ = -1;  // the last Scale's; -1: none yet
  std::chrono::steady_clock::time_point last_wake_{};
};

struct KubernetesActuatorOptions {
  std::string deployment;  // the workers' Deployment
  std::string ns;          // its namespace; empty: the pod's (namespace_file)
  // The API server; empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
  std::string api_server;
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
  std::chrono::milliseconds timeout{10000};
};

// PATCHes /apis/apps/v1/namespaces/NS/deployments/NAME/scale with
// {"spec":{"replicas":N}} (application/merge-patch+json), authorized by the service account's
// bearer token (read again for every request: Kubernetes rotates it), over TLS checked against
// the service account's CA. The service account needs `patch` on `deployments/scale`.
class KubernetesWorkerActuator : public WorkerActuator {
 public:
  // Checks the options and resolves the API server and namespace; an error names what is missing.
  static absl::StatusOr<std::unique_ptr<KubernetesWorkerActuator>> Create(
      KubernetesActuatorOptions options);
  absl::Status Scale(int workers) override;
  const std::string& url() const { return url_; }  // of the scale subresource

 private:
  explicit KubernetesWorkerActuator(KubernetesActuatorOptions options)
      : options_(std::move(options)) {}
  KubernetesActuatorOptions options_;
  std::string url_;
};

}  // namespace stoker::service
