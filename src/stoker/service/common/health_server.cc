#include "stoker/service/common/health_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "stoker/core/strings.h"
#include "stoker/core/thread.h"

namespace stoker::service {

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(StrCat("healthz socket: ", strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        StrCat("cannot listen for /healthz on port ", port, ": ", strerror(err),
               " (choose another --http-port)"));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<HealthServer>(new HealthServer(fd, ntohs(addr.sin_port)));
}

HealthServer::HealthServer(int fd, int port) : fd_(fd), port_(port) {
  thread_ = StartThread("healthz", [this] { Serve(); });
}

HealthServer::~HealthServer() {
  stop_ = true;
  thread_.join();
  ::close(fd_);
}

void HealthServer::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    timeval tv{1, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[1024];
    ssize_t n = ::recv(c, buf, sizeof(buf) - 1, 0);
    std::string request(buf, n > 0 ? n : 0);
    bool ok = request.starts_with("GET /healthz ") || request.starts_with("HEAD /healthz ");
    std::string body = ok ? "ok\n" : "not found\n";
    std::string response = StrCat("HTTP/1.1 ", ok ? "200 OK" : "404 Not Found",
                                  "\r\nContent-Type: text/plain\r\nContent-Length: ", body.size(),
                                  "\r\nConnection: close\r\n\r\n", body);
    (void)::send(c, response.data(), response.size(), MSG_NOSIGNAL);
    ::close(c);
  }
}

}  // namespace stoker::service
