#include "stoker/service/dispatcher/worker_actuator.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::service {
namespace {

std::string Describe(int status) {
  if (WIFEXITED(status)) return StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return StrCat("signal ", WTERMSIG(status));
  return "stopped";
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", what, " ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.empty()) return absl::InvalidArgumentError(StrCat(what, " ", path, " is empty"));
  return s;
}

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

// ---- local ----

LocalWorkerActuator::~LocalWorkerActuator() {
  for (Child& c : children_) {
    if (!c.stopping) ::kill(c.pid, SIGTERM);
    c.stopping = true;
  }
  for (const Standby& s : standby_) {  // end of file: it exits without registering
    ::close(s.wake_fd);
    children_.push_back({s.pid, true, true});
  }
  standby_.clear();
  auto deadline = std::chrono::steady_clock::now() + options_.stop_timeout;
  while (!children_.empty() && std::chrono::steady_clock::now() < deadline) {
    Reap(false);
    if (!children_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const Child& c : children_) {
    SPDLOG_WARN("autoscaler: worker pid {} did not drain within {} ms; killing it", c.pid,
                options_.stop_timeout.count());
    ::kill(c.pid, SIGKILL);
  }
  Reap(true);
}

std::vector<pid_t> LocalWorkerActuator::pids() const {
  std::vector<pid_t> out;
  for (const Child& c : children_) out.push_back(c.pid);
  return out;
}

std::vector<pid_t> LocalWorkerActuator::standby_pids() const {
  std::vector<pid_t> out;
  for (const Standby& s : standby_) out.push_back(s.pid);
  return out;
}

void LocalWorkerActuator::Reap(bool block) {
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    pid_t r = ::waitpid(it->pid, &status, block ? 0 : WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) {
      ++it;
      continue;
    }
    if (r > 0 && !it->stopping) {
      SPDLOG_WARN("autoscaler: worker pid {} exited on its own ({}); another is started", it->pid,
                  Describe(status));
    } else if (r > 0 && it->standby) {
      SPDLOG_INFO("autoscaler: standby worker pid {} ended ({})", it->pid, Describe(status));
    } else if (r > 0) {
      SPDLOG_INFO("autoscaler: worker pid {} drained and exited ({})", it->pid, Describe(status));
    }
    it = children_.erase(it);  // reaped (or not our child any more)
  }
}

absl::StatusOr<pid_t> LocalWorkerActuator::Spawn(int* wake_fd) {
  std::vector<std::string> args = {options_.executable, "worker", "--dispatcher",
                                   options_.dispatcher_address};
  args.insert(args.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  int sockets[2] = {-1, -1};  // ours, the child's
  if (wake_fd != nullptr) {
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0)
      return absl::ResourceExhaustedError(
          StrCat("autoscaler: cannot start a standby worker: socketpair: ", std::strerror(errno)));
    args.insert(args.end(), {"--standby-fd", "3"});
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    if (wake_fd != nullptr) {
      ::close(sockets[0]);
      ::close(sockets[1]);
    }
    return absl::ResourceExhaustedError(
        StrCat("autoscaler: cannot start a worker: fork: ", std::strerror(error)));
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec. It drains if the dispatcher dies, keeps
    // none of the dispatcher's descriptors (its listening sockets, its journal) but a standby's
    // socket as descriptor 3, gets the default signal mask, and writes its stdout to the
    // dispatcher's stderr (the log).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(2, 1);
    if (wake_fd != nullptr) {
      if (sockets[1] == 3) {
        ::fcntl(3, F_SETFD, 0);
      } else if (::dup2(sockets[1], 3) != 3) {
        ::_exit(1);
      }
    }
    ::close_range(wake_fd != nullptr ? 4 : 3, ~0U, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (wake_fd != nullptr) {
    ::close(sockets[1]);
    *wake_fd = sockets[0];
  }
  return pid;
}

absl::Status LocalWorkerActuator::StartOne() {
  ASSIGN_OR_RETURN(pid_t pid, Spawn(nullptr));
  children_.push_back({pid, false});
  SPDLOG_INFO("autoscaler: started worker pid {}", pid);
  return absl::OkStatus();
}

bool LocalWorkerActuator::WakeStandby() {
  while (!standby_.empty()) {
    Standby s = standby_.front();
    standby_.erase(standby_.begin());
    const char go = 1;
    const bool woken = ::send(s.wake_fd, &go, 1, MSG_NOSIGNAL) == 1;
    ::close(s.wake_fd);
    children_.push_back({s.pid, !woken, !woken});  // one that is gone is reaped as ended
    if (woken) {
      SPDLOG_INFO("autoscaler: woke standby worker pid {}", s.pid);
      last_wake_ = std::chrono::steady_clock::now();
      return true;
    }
    SPDLOG_WARN("autoscaler: standby worker pid {} is gone; trying the next", s.pid);
  }
  return false;
}

void LocalWorkerActuator::StartStandby() {
  // A standby that exited (it failed to start) is reaped and replaced here.
  for (auto it = standby_.begin(); it != standby_.end();) {
    int status = 0;
    if (::waitpid(it->pid, &status, WNOHANG) == it->pid) {
      SPDLOG_WARN("autoscaler: standby worker pid {} exited ({})", it->pid, Describe(status));
      ::close(it->wake_fd);
      it = standby_.erase(it);
    } else {
      ++it;
    }
  }
  while (static_cast<int>(standby_.size()) < options_.standby) {
    Standby s;
    absl::StatusOr<pid_t> pid = Spawn(&s.wake_fd);
    if (!pid.ok()) {
      SPDLOG_WARN("{}", pid.status().ToString());
      return;
    }
    s.pid = *pid;
    standby_.push_back(s);
    SPDLOG_INFO("autoscaler: started standby worker pid {}", s.pid);
  }
}

void LocalWorkerActuator::Tick() {
  Reap(false);
  if (wanted_ < 0) return;
  absl::Status s = Scale(wanted_);
  if (!s.ok()) SPDLOG_WARN("{}", s.ToString());
  if (std::chrono::steady_clock::now() - last_wake_ >= options_.standby_refill_delay)
    StartStandby();
}

absl::Status LocalWorkerActuator::Scale(int workers) {
  const bool first = wanted_ < 0;
  wanted_ = workers;
  Reap(false);
  int active = 0;
  for (const Child& c : children_) active += c.stopping ? 0 : 1;
  while (active < workers) {
    if (!WakeStandby()) RETURN_IF_ERROR(StartOne());
    ++active;
  }
  if (first) StartStandby();
  for (auto it = children_.rbegin(); it != children_.rend() && active > workers; ++it) {
    if (it->stopping) continue;
    ::kill(it->pid, SIGTERM);  // a drain: it finishes its splits, then leaves
    it->stopping = true;
    --active;
    SPDLOG_INFO("autoscaler: draining worker pid {}", it->pid);
  }
  return absl::OkStatus();
}

// ---- kubernetes ----

absl::StatusOr<std::unique_ptr<KubernetesWorkerActuator>> KubernetesWorkerActuator::Create(
    KubernetesActuatorOptions options) {
  if (options.deployment.empty())
    return absl::InvalidArgumentError(
        "--autoscale kubernetes needs --k8s-deployment (the workers' Deployment)");
  if (options.api_server.empty()) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0')
      return absl::FailedPreconditionError(
          "--autoscale kubernetes: KUBERNETES_SERVICE_HOST/PORT are not set; the dispatcher "
          "must run in a pod (with a service account allowed to patch deployments/scale)");
    std::string h = host;
    if (h.find(':') != std::string::npos) h = StrCat("[", h, "]");  // IPv6
    options.api_server = StrCat("https://", h, ":", port);
  }
  if (options.ns.empty()) {
    auto ns = ReadSmallFile(options.namespace_file, "the pod's namespace");
    if (!ns.ok())
      return absl::FailedPreconditionError(
          StrCat("--autoscale kubernetes: ", ns.status().message(), "; give --k8s-namespace"));
    options.ns = *ns;
  }
  std::unique_ptr<KubernetesWorkerActuator> a(new KubernetesWorkerActuator(std::move(options)));
  a->url_ = StrCat(a->options_.api_server, "/apis/apps/v1/namespaces/", a->options_.ns,
                   "/deployments/", a->options_.deployment, "/scale");
  return a;
}

absl::Status KubernetesWorkerActuator::Scale(int workers) {
  ASSIGN_OR_RETURN(std::string token,
                   ReadSmallFile(options_.token_file, "the service account token"));
  const std::string body = StrCat("{\"spec\":{\"replicas\":", workers, "}}");
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  curl_slist* headers = nullptr;
  const std::string auth = StrCat("Authorization: Bearer ", token);
  headers = curl_slist_append(headers, auth.c_str());
  headers = curl_slist_append(headers, "Content-Type: application/merge-patch+json");
  headers = curl_slist_append(headers, "Accept: application/json");
  std::string response;
  curl_easy_setopt(curl, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PATCH");
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  if (access(options_.ca_file.c_str(), R_OK) == 0)
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  CURLcode rc = curl_easy_perform(curl);
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK)
    return absl::UnavailableError(StrCat("PATCH ", url_, ": ", curl_easy_strerror(rc)));
  if (code < 200 || code > 299) {
    std::string hint;
    if (code == 401 || code == 403)
      hint =
          "; the dispatcher's service account needs `patch` on `deployments/scale` in "
          "apiGroup apps (docs/operations.md, \"Autoscaler\")";
    if (code == 404) hint = "; are the Deployment's name and namespace right?";
    std::string message =
        StrCat("PATCH ", url_, ": HTTP ", code, ": ", response.substr(0, 300), hint);
    if (code == 401 || code == 403) return absl::PermissionDeniedError(message);
    if (code == 404) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
  return absl::OkStatus();
}

}  // namespace stoker::service
