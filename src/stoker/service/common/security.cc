#include "stoker/service/common/security.h"

#include <grpcpp/support/client_interceptor.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/service/common/grpc_util.h"
#include "stoker/service/common/net_util.h"

namespace stoker::service {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", flag, " file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A token file's token: its content without surrounding white space (a trailing newline).
absl::StatusOr<std::string> ReadToken(const std::string& path, std::string_view flag) {
  ASSIGN_OR_RETURN(std::string text, ReadSecretFile(path, flag));
  const char* space = " \t\r\n";
  size_t b = text.find_first_not_of(space);
  if (b == std::string::npos)
    return absl::InvalidArgumentError(StrCat(flag, " file ", path, " is empty"));
  size_t e = text.find_last_not_of(space);
  std::string token = text.substr(b, e - b + 1);
  for (char c : token)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
      return absl::InvalidArgumentError(
          StrCat(flag, " file ", path,
                 ": a token is one line of printable ASCII without spaces (it travels in a gRPC "
                 "header)"));
  return token;
}

// Puts "Bearer TOKEN" in every call's metadata.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string& header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA))
      methods->GetSendInitialMetadata()->insert({kAuthorization, header_});
    methods->Proceed();
  }

 private:
  const std::string& header_;  // owned by the factory, which the channel keeps
};

class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string header) : header_(std::move(header)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(header_);
  }

 private:
  const std::string header_;
};

// What answers at an address, judged from its first bytes after an HTTP/2 client preface.
enum class Speaks { kUnknown, kPlaintextGrpc, kTls };

Speaks Probe(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return Speaks::kUnknown;
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr)
    return Speaks::kUnknown;
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (fd < 0) return Speaks::kUnknown;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  pollfd p{fd, POLLOUT, 0};
  if (rc != 0 && (errno != EINPROGRESS || ::poll(&p, 1, 500) != 1)) return Speaks::kUnknown;
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return Speaks::kUnknown;
  // The HTTP/2 connection preface and an empty SETTINGS frame.
  static const char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
  (void)::send(fd, kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL);
  unsigned char head[16];
  size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
  while (got < 5) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    p = pollfd{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, left) != 1) break;
    ssize_t n = ::recv(fd, head + got, sizeof(head) - got, 0);
    if (n == 0) {
      // Closed without an HTTP/2 frame: a TLS server dropping a plaintext hello (gRPC's TLS
      // server closes in order; a reset says nothing about the protocol).
      return got == 0 ? Speaks::kTls : Speaks::kUnknown;
    }
    if (n < 0) return Speaks::kUnknown;
    got += static_cast<size_t>(n);
  }
  if (got >= 4 && head[3] == 0x04) return Speaks::kPlaintextGrpc;             // a SETTINGS frame
  if (got >= 1 && (head[0] == 0x15 || head[0] == 0x16)) return Speaks::kTls;  // alert, handshake
  return Speaks::kUnknown;
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

absl::StatusOr<std::shared_ptr<const Security>> Security::Load(const SecurityOptions& o) {
  std::shared_ptr<Security> s(new Security());
  if (o.tls_cert_file.empty() != o.tls_key_file.empty())
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  if (!o.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(s->cert_, ReadSecretFile(o.tls_cert_file, "--tls-cert"));
    ASSIGN_OR_RETURN(s->key_, ReadSecretFile(o.tls_key_file, "--tls-key"));
  }
  if (!o.tls_client_ca_file.empty()) {
    if (o.tls_cert_file.empty())
      return absl::InvalidArgumentError(
          "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key to serve TLS");
    ASSIGN_OR_RETURN(s->client_ca_, ReadSecretFile(o.tls_client_ca_file, "--tls-client-ca"));
  }
  if (!o.tls_ca_file.empty()) {
    ASSIGN_OR_RETURN(s->ca_, ReadSecretFile(o.tls_ca_file, "--tls-ca"));
  }
  if (!o.token_file.empty()) {
    ASSIGN_OR_RETURN(s->client_token_, ReadToken(o.token_file, "--token-file"));
  }
  if (!o.worker_token_file.empty()) {
    ASSIGN_OR_RETURN(s->worker_token_, ReadToken(o.worker_token_file, "--worker-token-file"));
  } else {
    s->worker_token_ = s->client_token_;
  }
  return std::shared_ptr<const Security>(std::move(s));
}

std::shared_ptr<const Security> Security::None() {
  static const std::shared_ptr<const Security> none(new Security());
  return none;
}

std::shared_ptr<grpc::ServerCredentials> Security::ServerCredentials() const {
  if (!tls_server()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(
      client_ca_.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                         : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = client_ca_;
  o.pem_key_cert_pairs.push_back({key_, cert_});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::Channel> Security::MakeChannel(const std::string& address, Caller as) const {
  grpc::ChannelArguments args = ServiceChannelArguments();
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (tls_client()) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ca_;
    o.pem_private_key = key_;  // a client certificate for mutual TLS, if this side has one
    o.pem_cert_chain = cert_;
    creds = grpc::SslCredentials(o);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  const std::string& token = as == Caller::kWorker ? worker_token_ : client_token_;
  if (token.empty()) return grpc::CreateCustomChannel(address, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<TokenInterceptorFactory>(StrCat(kBearer, token)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args,
                                                                 std::move(creators));
}

grpc::Status Security::Check(const grpc::ServerContext& ctx, Caller caller, std::string_view server,
                             std::string_view rpc) const {
  const std::string& want = caller == Caller::kWorker ? worker_token_ : client_token_;
  if (want.empty()) return grpc::Status::OK;
  const bool separate = !worker_token_.empty() && worker_token_ != client_token_;
  const std::string flag = caller == Caller::kWorker && separate
                               ? "the worker's --worker-token-file (or STOKER_WORKER_TOKEN_FILE)"
                               : "--token-file (or STOKER_TOKEN_FILE)";
  const auto& md = ctx.client_metadata();
  auto it = md.find(kAuthorization);
  std::string_view got;
  if (it != md.end()) got = std::string_view(it->second.data(), it->second.size());
  const std::string_view bearer(kBearer);
  const bool has_token = got.size() > bearer.size() && got.substr(0, bearer.size()) == bearer;
  std::string why;
  if (!has_token) {
    why = StrCat("this ", server, " requires a ",
                 caller == Caller::kWorker && separate ? "worker " : "", "token: pass ", flag,
                 " naming a file with the token it was started with");
  } else if (!ConstantTimeEquals(got.substr(bearer.size()), want)) {
    why = StrCat("the token does not match the one this ", server,
                 " requires: check the file that ", flag, " names");
  } else {
    return grpc::Status::OK;
  }
  // At most one warning a second, so that a misconfigured peer cannot flood the log.
  static std::atomic<int64_t> last_warned{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_warned.load();
  if (now != last && last_warned.compare_exchange_strong(last, now))
    SPDLOG_WARN("{}: refused {} from {}: {}", server, rpc, ctx.peer(),
                has_token ? "wrong token" : "no token");
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
}

std::string DiagnoseUnavailable(const std::string& address, const Security& security,
                                const grpc::Status& status, bool* certain) {
  if (certain != nullptr) *certain = true;
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  // A mismatch is reported only when a second probe, a moment later, agrees: a server killed
  // while it held the first probe's connection closes it without a byte, just as a TLS server
  // drops a plaintext hello, and a dispatcher restarted on its port must not be reported as a
  // TLS server (found by the fault soak).
  Speaks speaks = Probe(address);
  if (speaks != Speaks::kUnknown) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (Probe(address) != speaks) speaks = Speaks::kUnknown;
  }
  if (!security.tls_client() && speaks == Speaks::kTls)
    return StrCat("the server at ", address,
                  " serves TLS and this side dials plaintext: pass --tls-ca (or set "
                  "STOKER_TLS_CA) naming the CA that signed its certificate");
  if (security.tls_client() && speaks == Speaks::kPlaintextGrpc)
    return StrCat("the server at ", address,
                  " serves plaintext gRPC and this side dials TLS (--tls-ca): start it with "
                  "--tls-cert and --tls-key, or dial it without --tls-ca");
  if (certain != nullptr) *certain = false;
  // The handshake was refused (a certificate not verified, or the server closed the connection:
  // no client certificate; which message depends on timing), not cut short by the deadline.
  const std::string& m = status.error_message();
  const bool refused = m.find("Ssl handshake failed") != std::string::npos ||
                       m.find("Handshake read failed") != std::string::npos ||
                       m.find("Socket closed") != std::string::npos;
  if (security.tls_client() && speaks == Speaks::kTls && refused)
    return StrCat("the TLS handshake with ", address, " failed (", status.error_message(),
                  "): check that --tls-ca is the CA that signed the server's certificate, that "
                  "the certificate names the host in ",
                  address,
                  ", and, if the server requires client certificates (--tls-client-ca), that "
                  "this side has --tls-cert and --tls-key signed by that CA");
  return "";
}

void WarnIfPlaintext(const Security& security, std::string_view server, const std::string& bind,
                     int port) {
  if (security.tls_server() || IsLoopbackAddress(bind)) return;
  static std::once_flag once;
  std::call_once(once, [&] {
    SPDLOG_WARN(
        "{}: serving plaintext gRPC on {}{}{}: whoever reaches this port can {}; pass --tls-cert "
        "and --tls-key (docs/security.md), or --bind 127.0.0.1 to serve this host only",
        server, ListenAddress(bind, port), IsWildcardAddress(bind) ? " (every interface)" : "",
        security.requires_token() ? ", the token in clear" : " without a token",
        security.requires_token() ? "read the token and the data in transit"
                                  : "read and feed the service's data");
  });
}

}  // namespace stoker::service
