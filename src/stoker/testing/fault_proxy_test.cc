#include "stoker/testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/testing/http_server.h"
#include "stoker/testing/loopback.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {
namespace {

// How a response read by RawClient ended.
enum class Ending { kComplete, kEof, kReset, kOtherError };

struct Response {
  int status = 0;
  std::string head;
  std::string body;
  int64_t content_length = -1;
  Ending ending = Ending::kOtherError;
};

// A minimal HTTP/1.1 client over one keep-alive connection, to see exactly what arrives (byte
// counts, FIN vs RST). Handles Content-Length bodies only.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ConnectToLoopback(port);
    connected_ = fd_ >= 0;
  }
  ~RawClient() { close(fd_); }
  bool connected() const { return connected_; }

  bool Send(std::string_view data) {
    return send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }

  Response Get(std::string_view path, std::string_view extra_headers = "") {
    Send(StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n", extra_headers, "\r\n"));
    return Read();
  }

  Response Read() {
    Response response;
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      Ending ending = Fill();
      if (ending != Ending::kComplete) {
        response.ending = ending;
        return response;
      }
    }
    response.head = buffer_.substr(0, head_end + 4);
    buffer_.erase(0, head_end + 4);
    absl::SimpleAtoi(response.head.substr(9, 3), &response.status);
    size_t cl = response.head.find("Content-Length: ");
    if (cl == std::string::npos) cl = response.head.find("content-length: ");
    if (cl != std::string::npos) {
      absl::SimpleAtoi(response.head.substr(cl + 16, response.head.find("\r\n", cl) - cl - 16),
                       &response.content_length);
    }
    if (response.content_length < 0) {
      response.ending = Ending::kOtherError;
      return response;
    }
    while (static_cast<int64_t>(buffer_.size()) < response.content_length) {
      Ending ending = Fill();
      if (ending != Ending::kComplete) {
        response.body = std::move(buffer_);
        buffer_.clear();
        response.ending = ending;
        return response;
      }
    }
    response.body = buffer_.substr(0, response.content_length);
    buffer_.erase(0, response.content_length);
    response.ending = Ending::kComplete;
    return response;
  }

 private:
  Ending Fill() {
    char chunk[65536];
    ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, n);
      return Ending::kComplete;
    }
    if (n == 0) return Ending::kEof;
    return errno == ECONNRESET ? Ending::kReset : Ending::kOtherError;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

class FaultProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<HttpTestServer*> server = HttpTestServer::Shared();
    ASSERT_TRUE(server.ok()) << server.status();
    nginx_ = *server;
    ASSERT_TRUE(nginx_->WriteFile("data/big.bin", kBig).ok());
    ASSERT_TRUE(nginx_->WriteFile("data/small.txt", "small file").ok());
    absl::StatusOr<std::unique_ptr<FaultProxy>> proxy =
        FaultProxy::Start({.upstream_port = nginx_->port()});
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = std::move(*proxy);
  }

  inline static const std::string kBig = RandomBytes(1 << 20, 7);
  HttpTestServer* nginx_ = nullptr;
  std::unique_ptr<FaultProxy> proxy_;
};

TEST_F(FaultProxyTest, ForwardsRequestsOverOneKeepAliveConnection) {
  RawClient client(proxy_->port());
  ASSERT_TRUE(client.connected());
  Response whole = client.Get("/data/big.bin");
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(whole.ending, Ending::kComplete);
  EXPECT_TRUE(whole.body == kBig);
  Response range = client.Get("/data/big.bin", "Range: bytes=10-19\r\n");
  EXPECT_EQ(range.status, 206);
  EXPECT_EQ(range.body, kBig.substr(10, 10));
  Response small = client.Get("/data/small.txt");
  EXPECT_EQ(small.body, "small file");
  EXPECT_EQ(proxy_->requests_seen(), 3);
  EXPECT_EQ(proxy_->faults_injected(), 0);
}

TEST_F(FaultProxyTest, RelaysChunkedListingsAndRequestBodies) {
  // nginx sends the JSON listing chunked; curl checks the framing.
  absl::StatusOr<std::string> listing =
      RunCommandOk({"curl", "-sS", "--fail", proxy_->endpoint() + "/data/"});
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_NE(listing->find("\"name\":\"small.txt\""), std::string::npos) << *listing;

  // A body with Expect: 100-continue reaches nginx (which refuses PUT with 405).
  absl::StatusOr<CommandResult> put =
      RunCommand({"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                  "Expect: 100-continue", "--data-binary", std::string(100000, 'x'), "-X", "PUT",
                  proxy_->endpoint() + "/data/new.txt"});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->output, "405");
}

TEST_F(FaultProxyTest, SlowDownForTheNextMatchingRequests) {
  proxy_->AddRule(
      {.method = "GET", .path_substring = "big.bin", .count = 2, .fault = FaultKind::kSlowDown503});
  RawClient client(proxy_->port());
  // A request that does not match passes.
  EXPECT_EQ(client.Get("/data/small.txt").status, 200);
  for (int i = 0; i < 2; ++i) {
    Response slow = client.Get("/data/big.bin");
    EXPECT_EQ(slow.status, 503);
    EXPECT_EQ(slow.ending, Ending::kComplete);  // the connection stays usable
    EXPECT_NE(slow.body.find("<Code>SlowDown</Code>"), std::string::npos) << slow.body;
  }
  Response ok = client.Get("/data/big.bin");
  EXPECT_EQ(ok.status, 200);
  EXPECT_TRUE(ok.body == kBig);
  EXPECT_EQ(proxy_->faults_injected(FaultKind::kSlowDown503), 2);
  EXPECT_EQ(proxy_->faults_injected(), 2);
  EXPECT_EQ(proxy_->requests_seen(), 4);
}

TEST_F(FaultProxyTest, InternalError) {
  proxy_->AddRule({.path_substring = "small", .count = 1, .fault = FaultKind::kInternalError500});
  RawClient client(proxy_->port());
  Response error = client.Get("/data/small.txt");
  EXPECT_EQ(error.status, 500);
  EXPECT_NE(error.body.find("<Code>InternalError</Code>"), std::string::npos) << error.body;
  EXPECT_EQ(client.Get("/data/small.txt").status, 200);
  EXPECT_EQ(proxy_->faults_injected(FaultKind::kInternalError500), 1);
}

TEST_F(FaultProxyTest, ResetAfterBytes) {
  proxy_->AddRule({.count = 1, .fault = FaultKind::kResetAfterBytes, .after_bytes = 1000});
  RawClient client(proxy_->port());
  Response reset = client.Get("/data/big.bin");
  EXPECT_EQ(reset.status, 200);
  EXPECT_EQ(reset.content_length, 1 << 20);  // the head promised the whole object
  EXPECT_EQ(reset.ending, Ending::kReset);
  EXPECT_EQ(reset.body, kBig.substr(0, 1000));
  EXPECT_EQ(proxy_->faults_injected(FaultKind::kResetAfterBytes), 1);
}

TEST_F(FaultProxyTest, TruncatedBody) {
  proxy_->AddRule({.path_substring = "big",
                   .count = 1,
                   .fault = FaultKind::kTruncateBody,
                   .after_bytes = 4096});
  RawClient client(proxy_->port());
  Response truncated = client.Get("/data/big.bin");
  EXPECT_EQ(truncated.status, 200);
  EXPECT_EQ(truncated.content_length, 1 << 20);
  EXPECT_EQ(truncated.ending, Ending::kEof);  // a clean close, just early
  EXPECT_EQ(truncated.body, kBig.substr(0, 4096));

  RawClient next(proxy_->port());
  EXPECT_TRUE(next.Get("/data/big.bin").body == kBig);
  EXPECT_EQ(proxy_->faults_injected(FaultKind::kTruncateBody), 1);
}

// Stall and latency are checked as lower bounds on the elapsed time (a correctness check: the
// delay happened), never as performance.
TEST_F(FaultProxyTest, StallHoldsTheRequest) {
  const absl::Duration stall = absl::Milliseconds(300);
  proxy_->AddRule({.count = 1, .fault = FaultKind::kStall, .stall = stall});
  RawClient client(proxy_->port());
  absl::Time start = absl::Now();
  Response stalled = client.Get("/data/small.txt");
  EXPECT_GE(absl::Now() - start, stall);
  EXPECT_EQ(stalled.body, "small file");
  EXPECT_EQ(proxy_->faults_injected(FaultKind::kStall), 1);
}

TEST_F(FaultProxyTest, LatencyDelaysEveryResponse) {
  const absl::Duration latency = absl::Milliseconds(100);
  proxy_->set_latency(latency);
  RawClient client(proxy_->port());
  for (int i = 0; i < 3; ++i) {
    absl::Time start = absl::Now();
    EXPECT_EQ(client.Get("/data/small.txt").status, 200);
    EXPECT_GE(absl::Now() - start, latency);
  }
  proxy_->set_latency(absl::ZeroDuration());
  EXPECT_EQ(proxy_->faults_injected(), 0);
}

TEST_F(FaultProxyTest, ProbabilityRulesAreSeededAndCanBeCleared) {
  proxy_->AddRule({.probability = 0.5, .fault = FaultKind::kSlowDown503});
  RawClient client(proxy_->port());
  int errors = 0;
  for (int i = 0; i < 40; ++i) errors += client.Get("/data/small.txt").status == 503 ? 1 : 0;
  EXPECT_GT(errors, 0);
  EXPECT_LT(errors, 40);
  EXPECT_EQ(proxy_->faults_injected(), errors);

  // The same seed gives the same sequence.
  absl::StatusOr<std::unique_ptr<FaultProxy>> twin =
      FaultProxy::Start({.upstream_port = nginx_->port()});
  ASSERT_TRUE(twin.ok()) << twin.status();
  (*twin)->AddRule({.probability = 0.5, .fault = FaultKind::kSlowDown503});
  RawClient twin_client((*twin)->port());
  for (int i = 0; i < 40; ++i) twin_client.Get("/data/small.txt");
  EXPECT_EQ((*twin)->faults_injected(), errors);

  proxy_->ClearRules();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(client.Get("/data/small.txt").status, 200);
  EXPECT_EQ(proxy_->faults_injected(), errors);
}

TEST(FaultProxyUpstreamTest, UnreachableUpstreamGets502) {
  // A port nothing listens on.
  absl::StatusOr<std::unique_ptr<FaultProxy>> proxy =
      FaultProxy::Start({.upstream_port = FreeLoopbackPort()});
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  RawClient client((*proxy)->port());
  EXPECT_EQ(client.Get("/anything").status, 502);
}

TEST(FaultProxyUpstreamTest, RejectsBadOptions) {
  EXPECT_FALSE(FaultProxy::Start({.upstream_host = "localhost", .upstream_port = 80}).ok());
  EXPECT_FALSE(FaultProxy::Start({.upstream_port = 0}).ok());
}

TEST_F(FaultProxyTest, DestructionEndsStalledAndIdleConnections) {
  RawClient idle(proxy_->port());
  EXPECT_EQ(idle.Get("/data/small.txt").status, 200);  // now an idle keep-alive connection
  proxy_->AddRule({.count = 1, .fault = FaultKind::kStall, .stall = absl::Hours(1)});
  RawClient stalled(proxy_->port());
  ASSERT_TRUE(stalled.Send("GET /data/small.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (proxy_->faults_injected(FaultKind::kStall) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(proxy_->faults_injected(FaultKind::kStall), 1);
  EXPECT_GE(LiveThreadCount(), 3);  // the acceptor and one thread per connection
  proxy_.reset();                   // must not wait out the stall
  EXPECT_EQ(LiveThreadCount(), 0);  // every thread was joined
  EXPECT_EQ(stalled.Read().ending, Ending::kEof);
  EXPECT_EQ(idle.Read().ending, Ending::kEof);
}

}  // namespace
}  // namespace stoker::testing
