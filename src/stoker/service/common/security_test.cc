// Tokens on every RPC: a real Dispatcher and Worker (in-process, plaintext gRPC on loopback) with
// a client and a worker token; every method of both services, taken from the services'
// descriptors (so that an RPC added later is covered too), refuses a call without the right token.
// TLS is tested with real processes and certificates in tests/ops/security_test.py.
#include "stoker/service/common/security.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "stoker/core/strings.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"
#include "stoker/testing/loopback.h"
#include "stoker/testing/subprocess.h"

namespace stoker::service {
namespace {

using namespace std::chrono_literals;

TEST(Security, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("token", "token"));
  EXPECT_FALSE(ConstantTimeEquals("token", "tokex"));
  EXPECT_FALSE(ConstantTimeEquals("token", "token2"));
  EXPECT_FALSE(ConstantTimeEquals("token", ""));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("a\0", 2), "a"));
}

// A server on 127.0.0.1 that reads the first bytes of each of its first `connections`
// connections and closes them without answering (as gRPC's TLS server drops a plaintext hello),
// then stops listening (as a server killed with its connection does).
class ClosingServer {
 public:
  explicit ClosingServer(int connections) {
    auto listener = testing::ListenOnLoopback(0, 4);
    EXPECT_TRUE(listener.ok()) << listener.status();
    if (listener.ok()) {
      fd_ = listener->fd;
      address_ = StrCat("127.0.0.1:", listener->port);
    }
    thread_ = std::thread([this, connections] {
      for (int i = 0; i < connections; ++i) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) break;
        char buf[64];
        (void)::recv(c, buf, sizeof(buf), 0);
        ::close(c);
      }
      ::close(fd_);
    });
  }
  ~ClosingServer() { thread_.join(); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
  std::thread thread_;
};

TEST(Security, APlaintextClientToAServerThatDropsItsHelloIsToldToUseTls) {
  ClosingServer server(2);
  std::string why = DiagnoseUnavailable(server.address(), *Security::None(),
                                        grpc::Status(grpc::StatusCode::UNAVAILABLE, "closed"));
  EXPECT_NE(why.find("serves TLS and this side dials plaintext"), std::string::npos) << why;
}

// A dispatcher killed (or restarted) while it held the probe's connection closes it just as a
// TLS server would; that is no mismatch, and a consumer told so would give up on a dispatcher
// that is back a second later.
TEST(Security, AServerThatDiesHoldingTheProbeIsNotCalledATlsServer) {
  ClosingServer server(1);
  bool certain = false;
  std::string why =
      DiagnoseUnavailable(server.address(), *Security::None(),
                          grpc::Status(grpc::StatusCode::UNAVAILABLE, "closed"), &certain);
  EXPECT_EQ(why, "");
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(Security, LoadErrorsNameTheFileNotItsContents) {
  testing::ScopedTempDir dir;
  SecurityOptions o;
  o.token_file = dir.path() + "/missing";
  auto s = Security::Load(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--token-file file " + o.token_file), std::string::npos)
      << s.status();

  WriteFile(dir.path() + "/empty", " \n");
  o.token_file = dir.path() + "/empty";
  s = Security::Load(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("is empty"), std::string::npos) << s.status();

  WriteFile(dir.path() + "/spaced", "secret part2\n");
  o.token_file = dir.path() + "/spaced";
  s = Security::Load(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message().find("secret"), std::string::npos) << s.status();

  o = SecurityOptions();
  o.tls_cert_file = dir.path() + "/cert.pem";
  s = Security::Load(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tls-key"), std::string::npos) << s.status();

  WriteFile(dir.path() + "/ok", "  the-token\n");
  o = SecurityOptions();
  o.token_file = dir.path() + "/ok";
  s = Security::Load(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->requires_token());
  EXPECT_FALSE((*s)->tls_server());
  EXPECT_FALSE((*s)->tls_client());
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_.path() + "/client", "cl1ent-secret\n");
    WriteFile(dir_.path() + "/worker", "w0rker-secret\n");
    WriteFile(dir_.path() + "/wrong", "wr0ng-secret\n");
    DispatcherOptions d;
    d.security.token_file = dir_.path() + "/client";
    d.security.worker_token_file = dir_.path() + "/worker";
    auto dispatcher = Dispatcher::Start(d);
    ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
    dispatcher_ = std::move(*dispatcher);
    WorkerOptions w;
    w.dispatcher_address = StrCat("127.0.0.1:", dispatcher_->port());
    w.heartbeat_interval = 100ms;
    w.security = d.security;
    auto worker = Worker::Start(w);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
  }

  // A channel presenting the token in `file` ("": none) as a client.
  std::shared_ptr<grpc::Channel> Channel(const std::string& service, const std::string& file) {
    SecurityOptions o;
    if (!file.empty()) o.token_file = dir_.path() + "/" + file;
    auto s = Security::Load(o);
    EXPECT_TRUE(s.ok()) << s.status();
    int port = service == "stoker.service.WorkerService" ? worker_->port() : dispatcher_->port();
    return (*s)->MakeChannel(StrCat("127.0.0.1:", port), Caller::kClient);
  }

  // An empty request to `method`: the status it ended with.
  static grpc::Status Call(const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& method) {
    grpc::GenericStub stub(channel);
    grpc::Slice empty("", 0);
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10s);
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }

  testing::ScopedTempDir dir_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<Worker> worker_;
};

TEST_F(TokenTest, EveryMethodOfEveryServiceRefusesAWrongOrMissingToken) {
  int methods = 0;
  for (const char* name : {"stoker.service.DispatcherService", "stoker.service.WorkerService"}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string method = StrCat("/", name, "/", service->method(i)->name());
      const bool worker_rpc = service->method(i)->name() == "WorkerHeartbeat" ||
                              service->method(i)->name() == "GetSplit";
      ++methods;
      for (const char* file : {"", "wrong", worker_rpc ? "client" : "worker"}) {
        grpc::Status s = Call(Channel(name, file), method);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << method << " with token file '" << file << "': " << s.error_message();
        EXPECT_NE(s.error_message().find("token"), std::string::npos) << s.error_message();
        EXPECT_EQ(s.error_message().find("secret"), std::string::npos) << s.error_message();
      }
      if (!worker_rpc) {  // the right token passes the check (the empty request may then fail)
        grpc::Status s = Call(Channel(name, "client"), method);
        EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << method << ": " << s.error_message();
      }
    }
  }
  EXPECT_EQ(methods, 5);
}

}  // namespace
}  // namespace stoker::service
