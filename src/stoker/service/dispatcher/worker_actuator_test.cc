#include "stoker/service/dispatcher/worker_actuator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "stoker/testing/loopback.h"
#include "stoker/testing/subprocess.h"

namespace stoker::service {
namespace {

// A tiny HTTP server on 127.0.0.1 that answers one request with `status` and `body` and records
// the request as received (request line, headers and body).
class OneRequestServer {
 public:
  OneRequestServer(int status, std::string body) {
    auto listener = testing::ListenOnLoopback(0, 1);
    EXPECT_TRUE(listener.ok()) << listener.status();
    if (listener.ok()) {
      fd_ = listener->fd;
      port_ = listener->port;
    }
    thread_ = std::thread([this, status, body] { Serve(status, body); });
  }
  ~OneRequestServer() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The request, once answered.
  std::string request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  void Serve(int status, const std::string& body) {
    int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    size_t header_end = std::string::npos;
    size_t content_length = 0;
    while (true) {
      ssize_t n = ::read(c, buf, sizeof(buf));
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
      if (header_end == std::string::npos) {
        header_end = request_.find("\r\n\r\n");
        if (header_end == std::string::npos) continue;
        size_t cl = request_.find("Content-Length: ");
        if (cl != std::string::npos && cl < header_end)
          content_length = std::stoul(request_.substr(cl + 16));
      }
      if (request_.size() >= header_end + 4 + content_length) break;
    }
    std::string reply = "HTTP/1.1 " + std::to_string(status) +
                        " X\r\nContent-Type: application/json\r\nConnection: close\r\n"
                        "Content-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)!::write(c, reply.data(), reply.size());
    ::close(c);
  }
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string request_;
};

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// The local actuator with a stand-in for `stoker worker`: a script that exits 0 on SIGTERM.
TEST(LocalActuator, StartsStopsNewestFirstReplacesCrashedAndDrainsAllAtTheEnd) {
  testing::ScopedTempDir dir;
  const std::string exe = dir.path() + "/fake-worker";
  Write(exe, "#!/bin/sh\ntrap 'exit 0' TERM\nwhile :; do sleep 0.02; done\n");
  ASSERT_EQ(::chmod(exe.c_str(), 0755), 0);
  std::vector<pid_t> all;
  {
    LocalActuatorOptions o;
    o.executable = exe;
    o.dispatcher_address = "127.0.0.1:1";
    o.stop_timeout = std::chrono::seconds(10);
    LocalWorkerActuator a(o);
    ASSERT_TRUE(a.Scale(3).ok());
    std::vector<pid_t> three = a.pids();
    ASSERT_EQ(three.size(), 3u);
    ASSERT_TRUE(a.Scale(2).ok());  // the newest is told to drain
    for (int i = 0; i < 200 && a.children() > 2; ++i) {
      a.Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(a.pids(), std::vector<pid_t>(three.begin(), three.begin() + 2));
    EXPECT_FALSE(Alive(three[2]));
    // A worker that dies on its own is replaced at the next tick.
    ::kill(three[0], SIGKILL);
    for (int i = 0; i < 200 && a.pids()[0] == three[0]; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      a.Tick();
    }
    std::vector<pid_t> now = a.pids();
    ASSERT_EQ(now.size(), 2u);
    EXPECT_EQ(now[0], three[1]);
    EXPECT_NE(now[1], three[0]);
    all = three;
    all.push_back(now[1]);
  }
  for (pid_t p : all) EXPECT_FALSE(Alive(p)) << p;  // drained and reaped by the destructor
}

// Standby workers: a stand-in that, given --standby-fd, reads one byte from descriptor 3 and
// records whether it was woken or reached the end of file.
TEST(LocalActuator, WakesStandbyWorkersReplacesThemAfterTheRefillDelayAndEndsTheRest) {
  testing::ScopedTempDir dir;
  const std::string exe = dir.path() + "/fake-worker";
  Write(exe,
        "#!/bin/sh\ntrap 'exit 0' TERM\nfor a in \"$@\"; do\n"
        "  if [ \"$a\" = --standby-fd ]; then\n"
        "    b=$(head -c1 <&3)\n"
        "    if [ -z \"$b\" ]; then touch " +
            dir.path() +
            "/ended-$$; exit 0; fi\n"
            "    touch " +
            dir.path() +
            "/woken-$$\n"
            "  fi\n"
            "done\nwhile :; do sleep 0.02; done\n");
  ASSERT_EQ(::chmod(exe.c_str(), 0755), 0);
  auto exists = [&](const std::string& what, pid_t pid) {
    struct stat st;
    return ::stat((dir.path() + "/" + what + "-" + std::to_string(pid)).c_str(), &st) == 0;
  };
  auto eventually = [](const std::function<bool()>& done) {
    for (int i = 0; i < 500 && !done(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return done();
  };
  std::vector<pid_t> workers, first_standby, second_standby;
  {
    LocalActuatorOptions o;
    o.executable = exe;
    o.dispatcher_address = "127.0.0.1:1";
    o.stop_timeout = std::chrono::seconds(10);
    o.standby = 2;
    // Long, so that the tick right after the wake comes sooner even on a loaded machine.
    o.standby_refill_delay = std::chrono::milliseconds(1000);
    LocalWorkerActuator a(o);
    ASSERT_TRUE(a.Scale(1).ok());  // one worker, and the standby ones with the first Scale
    ASSERT_EQ(a.pids().size(), 1u);
    first_standby = a.standby_pids();
    ASSERT_EQ(first_standby.size(), 2u);
    EXPECT_EQ(a.standby_workers(), 2);  // what a job of a new pipeline starts with
    ASSERT_TRUE(a.Scale(3).ok());       // wakes both instead of starting processes
    a.Tick();  // the dispatcher ticks right after it scaled: too soon to refill
    EXPECT_TRUE(a.standby_pids().empty());
    EXPECT_EQ(a.standby_workers(), 0);
    workers = a.pids();
    ASSERT_EQ(workers.size(), 3u);
    EXPECT_EQ(std::vector<pid_t>(workers.begin() + 1, workers.end()), first_standby);
    for (pid_t p : first_standby) EXPECT_TRUE(eventually([&] { return exists("woken", p); })) << p;
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    a.Tick();  // standby_refill_delay after the wake
    second_standby = a.standby_pids();
    ASSERT_EQ(second_standby.size(), 2u);
    // A standby that dies is replaced at the next tick; with none left, a scale-up starts one.
    ::kill(second_standby[0], SIGKILL);
    ASSERT_TRUE(eventually([&] {
      a.Tick();
      return a.standby_pids().size() == 2u && a.standby_pids()[0] == second_standby[1];
    }));
    second_standby = a.standby_pids();
    ASSERT_TRUE(a.Scale(6).ok());  // two woken, one started
    EXPECT_EQ(a.pids().size(), 6u);
    EXPECT_TRUE(a.standby_pids().empty());
    workers = a.pids();
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    a.Tick();
    second_standby = a.standby_pids();
    ASSERT_EQ(second_standby.size(), 2u);
    for (pid_t p : second_standby)  // started, blocked before their read (or in it)
      EXPECT_FALSE(exists("woken", p)) << p;
  }
  // The destructor drained the workers and closed the standby ones' sockets: they ended.
  for (pid_t p : workers) EXPECT_FALSE(Alive(p)) << p;
  for (pid_t p : second_standby) {
    EXPECT_FALSE(Alive(p)) << p;
    EXPECT_TRUE(exists("ended", p)) << p;
  }
}

TEST(KubernetesActuator, PatchesTheDeploymentsScaleWithTheServiceAccountToken) {
  testing::ScopedTempDir dir;
  Write(dir.path() + "/token", "tok-123\n");
  Write(dir.path() + "/namespace", "data-ns\n");
  OneRequestServer server(200, R"({"kind":"Scale","spec":{"replicas":3}})");
  KubernetesActuatorOptions o;
  o.deployment = "stoker-worker";
  o.api_server = server.url();
  o.token_file = dir.path() + "/token";
  o.namespace_file = dir.path() + "/namespace";
  o.ca_file = dir.path() + "/no-ca.crt";
  auto a = KubernetesWorkerActuator::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->url(), server.url() +
                             "/apis/apps/v1/namespaces/data-ns/deployments/"
                             "stoker-worker/scale");
  ASSERT_TRUE((*a)->Scale(3).ok());
  const std::string r = server.request();
  EXPECT_EQ(r.substr(0, r.find("\r\n")),
            "PATCH /apis/apps/v1/namespaces/data-ns/deployments/stoker-worker/scale HTTP/1.1");
  EXPECT_NE(r.find("\r\nAuthorization: Bearer tok-123\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\nContent-Type: application/merge-patch+json\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), R"({"spec":{"replicas":3}})");
}

TEST(KubernetesActuator, ForbiddenNamesThePermissionNeeded) {
  testing::ScopedTempDir dir;
  Write(dir.path() + "/token", "tok");
  OneRequestServer server(403, R"({"kind":"Status","reason":"Forbidden"})");
  KubernetesActuatorOptions o;
  o.deployment = "w";
  o.ns = "ns1";  // given: the namespace file is not read
  o.api_server = server.url();
  o.token_file = dir.path() + "/token";
  o.namespace_file = dir.path() + "/missing";
  auto a = KubernetesWorkerActuator::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::Status s = (*a)->Scale(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("HTTP 403"), std::string::npos) << s;
  EXPECT_NE(s.message().find("deployments/scale"), std::string::npos) << s;
  EXPECT_NE(server.request().find("/namespaces/ns1/deployments/w/scale"), std::string::npos);
}

TEST(KubernetesActuator, OutsideAPodSaysWhatIsMissing) {
  KubernetesActuatorOptions o;
  EXPECT_NE(KubernetesWorkerActuator::Create(o).status().message().find("--k8s-deployment"),
            std::string::npos);
  o.deployment = "w";
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  absl::Status s = KubernetesWorkerActuator::Create(o).status();
  EXPECT_NE(s.message().find("KUBERNETES_SERVICE_HOST"), std::string::npos) << s;
  ::setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  o.namespace_file = "/nonexistent/namespace";
  s = KubernetesWorkerActuator::Create(o).status();
  EXPECT_NE(s.message().find("--k8s-namespace"), std::string::npos) << s;
  o.ns = "n";
  auto a = KubernetesWorkerActuator::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->url(), "https://10.0.0.1:443/apis/apps/v1/namespaces/n/deployments/w/scale");
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
}

}  // namespace
}  // namespace stoker::service
