#include "stoker/service/common/health_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "stoker/core/metrics.h"
#include "stoker/core/strings.h"
#include "stoker/testing/loopback.h"

namespace stoker::service {
namespace {

int Connect(int port) {
  int fd = testing::ConnectToLoopback(port);
  EXPECT_GE(fd, 0) << "connect to 127.0.0.1:" << port << ": " << strerror(errno);
  return fd;
}

// Sends `request` and returns the whole response ("" if none came within `timeout_s`).
std::string Ask(int port, const std::string& request, int timeout_s = 3) {
  int fd = Connect(port);
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buf[512];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return response;
}

TEST(HealthServer, AnswersHealthzAnd404) {
  auto server = HealthServer::Start(0);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string ok = Ask((*server)->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK", 0), 0u) << ok;
  EXPECT_NE(ok.find("\r\n\r\nok\n"), std::string::npos) << ok;
  std::string missing = Ask((*server)->port(), "GET /nothing HTTP/1.1\r\n\r\n");
  EXPECT_EQ(missing.rfind("HTTP/1.1 404", 0), 0u) << missing;
  std::string garbage = Ask((*server)->port(), std::string(5000, '\x01'));
  EXPECT_EQ(garbage.rfind("HTTP/1.1 405", 0), 0u) << garbage;
  std::string head = Ask((*server)->port(), "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK", 0), 0u) << head;
  EXPECT_EQ(head.find("ok\n"), std::string::npos) << head;  // no body
}

TEST(HealthServer, ServesMetricsAndAddedPagesInFull) {
  auto server = HealthServer::Start(0);
  ASSERT_TRUE(server.ok()) << server.status();
  MetricsRegistry::Default()
      .GetCounter("stoker_health_server_test_total", "A counter of this test")
      .Increment(3);
  std::string metrics = Ask((*server)->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(metrics.rfind("HTTP/1.1 200 OK", 0), 0u) << metrics;
  EXPECT_NE(metrics.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics.find("\nstoker_health_server_test_total 3\n"), std::string::npos) << metrics;
  // A body far larger than a socket buffer arrives whole; the query string reaches the handler.
  std::string big(8 << 20, 'x');
  (*server)->Handle("/big", [&](const std::string& query) {
    return HttpReply{503, "text/plain", query + big};
  });
  std::string reply = Ask((*server)->port(), "GET /big?q=1 HTTP/1.1\r\n\r\n", /*timeout_s=*/10);
  EXPECT_EQ(reply.rfind("HTTP/1.1 503 Service Unavailable", 0), 0u) << reply.substr(0, 100);
  EXPECT_NE(reply.find(StrCat("Content-Length: ", big.size() + 3)), std::string::npos);
  EXPECT_TRUE(reply.ends_with("\r\n\r\nq=1" + big));
}

// Connections that send nothing are served side by side with the others (each used to hold the
// server for its 1 s timeout, so a few of them made probes miss theirs).
TEST(HealthServer, IdleConnectionsDoNotHoldUpOthers) {
  auto server = HealthServer::Start(0);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> idle;
  idle.reserve(8);
  for (int i = 0; i < 8; ++i) idle.push_back(Connect((*server)->port()));
  std::string ok = Ask((*server)->port(), "GET /healthz HTTP/1.1\r\n\r\n", /*timeout_s=*/3);
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK", 0), 0u) << ok;
  for (int fd : idle) ::close(fd);
}

}  // namespace
}  // namespace stoker::service
