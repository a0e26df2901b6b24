// A service cluster of real processes for integration tests: the built `stoker` binary run as
// dispatcher, workers and `stoker consume`, on loopback.
//
// Thread safety: a ServiceCluster is used by one test thread.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stoker/testing/loopback.h"

extern char** environ;

namespace stoker::testing {

inline std::string StokerBinary() { return std::string(STOKER_TEST_BINARY_DIR) + "/stoker"; }

inline int FreePort() { return FreeLoopbackPort(); }

// Whether something on 127.0.0.1 accepts a connection on `port`.
inline bool Accepts(int port) {
  int fd = ConnectToLoopback(port);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

// A child process with stdout and stderr in files.
class Process {
 public:
  Process(std::vector<std::string> argv, const std::string& out_path, const std::string& err_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int pid() const { return pid_; }
  void Signal(int sig) { ::kill(pid_, sig); }
  void Kill9() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    exited_ = true;
  }
  // Whether the process has ended (without waiting).
  bool Exited() {
    if (!exited_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    return exited_;
  }
  // The exit code once the process ended within `timeout`; -1 on timeout (it is killed then).
  int Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Exited()) {
        return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a child, no sync
    }
    Kill9();
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
};

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Dispatcher + workers, with short heartbeats so that lost workers are noticed quickly.
class ServiceCluster {
 public:
  explicit ServiceCluster(std::string dir) : dir_(std::move(dir)), port_(FreePort()) {}

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& dir() const { return dir_; }

  // Starts the dispatcher and waits until it accepts connections. The port was free when the
  // cluster chose it, but another process may take it before the dispatcher binds it (tests run
  // in parallel, and outgoing connections draw from the same port range): a dispatcher that
  // exits at once is started again on another free port (before any worker knows the address).
  void StartDispatcher() {
    for (int attempt = 0; attempt < 5; ++attempt) {
      dispatcher_ = std::make_unique<Process>(
          std::vector<std::string>{StokerBinary(), "dispatcher", "--port", std::to_string(port_),
                                   "--work-dir", dir_ + "/work", "--worker-timeout-ms", "600"},
          dir_ + "/dispatcher.out", dir_ + "/dispatcher.err");
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!dispatcher_->Exited() && !Accepts(port_) &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child's port
      if (!dispatcher_->Exited()) return;
      port_ = FreePort();
    }
  }
  Process& dispatcher() { return *dispatcher_; }

  Process& AddWorker() {
    int i = static_cast<int>(workers_.size());
    workers_.push_back(std::make_unique<Process>(
        std::vector<std::string>{StokerBinary(), "worker", "--dispatcher", address(),
                                 "--heartbeat-ms", "100", "--threads", "1"},
        dir_ + "/worker" + std::to_string(i) + ".out",
        dir_ + "/worker" + std::to_string(i) + ".err"));
    return *workers_.back();
  }
  Process& worker(int i) { return *workers_[i]; }

  // `stoker consume --print-keys` into dir/consume.out.
  std::unique_ptr<Process> StartConsume(const std::string& spec_path,
                                        std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{StokerBinary(), "consume",      "--dispatcher",   address(),
                                  spec_path,      "--print-keys", "--heartbeat-ms", "100"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(argv, dir_ + "/consume.out", dir_ + "/consume.err");
  }

 private:
  std::string dir_;
  int port_;
  std::unique_ptr<Process> dispatcher_;
  std::vector<std::unique_ptr<Process>> workers_;
};

}  // namespace stoker::testing
