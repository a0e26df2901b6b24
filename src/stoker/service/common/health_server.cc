#include "stoker/service/common/health_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "stoker/core/metrics.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/service/common/net_util.h"

namespace stoker::service {

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(int port,
                                                                  const std::string& bind) {
  ASSIGN_OR_RETURN(std::string address, ParseBindAddress(bind));
  sockaddr_storage storage{};
  socklen_t size = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    size = sizeof(*v4);
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    size = sizeof(*v6);
  }
  int fd = ::socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(StrCat("healthz socket: ", strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&storage), size) != 0 || ::listen(fd, 16) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(StrCat("cannot listen for /healthz on ",
                                         ListenAddress(address, port), ": ", strerror(err),
                                         " (choose another --http-port, or a --bind address of "
                                         "this host)"));
  }
  socklen_t len = sizeof(storage);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &len);
  const int bound = ntohs(storage.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return std::unique_ptr<HealthServer>(new HealthServer(fd, bound));
}

HealthServer::HealthServer(int fd, int port) : fd_(fd), port_(port) {
  Handle("/healthz", [](const std::string&) { return HttpReply{200, "text/plain", "ok\n"}; });
  Handle("/metrics", [](const std::string&) {
    return HttpReply{200, std::string(MetricsRegistry::kContentType),
                     MetricsRegistry::Default().Render()};
  });
  thread_ = StartThread("healthz", [this] { Serve(); });
}

HealthServer::~HealthServer() {
  stop_ = true;
  thread_.join();
  ::close(fd_);
}

namespace {

// One accepted connection: what it sent so far and when it must have sent its request line.
struct Connection {
  int fd;
  std::string request;
  std::chrono::steady_clock::time_point deadline;
};

constexpr size_t kMaxConnections = 64;  // beyond this, the oldest is closed
constexpr auto kRequestTimeout = std::chrono::seconds(1);

constexpr auto kSendTimeout = std::chrono::seconds(2);

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

}  // namespace

void HealthServer::Handle(const std::string& path, HttpHandler handler) {
  absl::MutexLock lock(&mu_);
  handlers_[path] = std::move(handler);
}

// Request line: METHOD SP TARGET SP VERSION. The reply is sent in full (blocking, for at most
// kSendTimeout: a /metrics page can exceed the socket buffer).
void HealthServer::Answer(int fd, const std::string& request) {
  size_t sp1 = request.find(' ');
  size_t sp2 = sp1 == std::string::npos ? sp1 : request.find(' ', sp1 + 1);
  std::string method = request.substr(0, sp1);
  std::string target = sp2 == std::string::npos ? "" : request.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t q = target.find('?');
  std::string path = target.substr(0, q);
  std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  HttpHandler handler;
  {
    absl::MutexLock lock(&mu_);
    auto it = handlers_.find(path);
    if (it != handlers_.end()) handler = it->second;
  }
  HttpReply reply{404, "text/plain", "not found\n"};
  if (method != "GET" && method != "HEAD") {
    reply = {405, "text/plain", "only GET and HEAD\n"};
  } else if (handler) {
    reply = handler(query);
  }
  std::string response =
      StrCat("HTTP/1.1 ", reply.status, " ", Reason(reply.status),
             "\r\nContent-Type: ", reply.content_type, "\r\nContent-Length: ", reply.body.size(),
             "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n");
  if (method == "GET") response += reply.body;
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{std::chrono::duration_cast<std::chrono::seconds>(kSendTimeout).count(), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  size_t sent = 0;
  while (sent < response.size()) {
    ssize_t n = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
}

// One thread polls the listening socket and every open connection together, so a connection that
// sends nothing (a scanner, a half-open probe) delays nobody: it is closed at its deadline.
void HealthServer::Serve() {
  std::vector<Connection> open;
  while (!stop_) {
    std::vector<pollfd> fds{{fd_, POLLIN, 0}};
    for (const Connection& c : open) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) continue;
    auto now = std::chrono::steady_clock::now();
    std::vector<Connection> still_open;
    for (size_t i = 0; i < open.size(); ++i) {
      Connection& c = open[i];
      bool done = now > c.deadline;
      if (!done && (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[1024];
        ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) c.request.append(buf, static_cast<size_t>(n));
        done = n <= 0 || c.request.find("\r\n") != std::string::npos || c.request.size() >= 1024;
        if (done) Answer(c.fd, c.request);
      }
      if (done) {
        ::close(c.fd);
      } else {
        still_open.push_back(std::move(c));
      }
    }
    open = std::move(still_open);
    if (fds[0].revents & POLLIN) {
      int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (open.size() >= kMaxConnections) {
          ::close(open.front().fd);
          open.erase(open.begin());
        }
        open.push_back({fd, "", now + kRequestTimeout});
      }
    }
  }
  for (const Connection& c : open) ::close(c.fd);
}

}  // namespace stoker::service
