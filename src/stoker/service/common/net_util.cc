#include "stoker/service/common/net_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "stoker/core/strings.h"

namespace stoker::service {

absl::StatusOr<std::string> LocalAddressTowards(std::string_view host_port) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return absl::InvalidArgumentError(StrCat("'", host_port, "' is not HOST:PORT"));
  std::string host(host_port.substr(0, colon));
  std::string port(host_port.substr(colon + 1));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return absl::UnavailableError(StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  int err = errno;
  ::freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  if (rc != 0) err = errno;
  if (fd >= 0) ::close(fd);
  if (rc != 0) return absl::UnavailableError(StrCat("no route to ", host, ": ", strerror(err)));
  char text[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

absl::StatusOr<std::string> ParseBindAddress(std::string_view address) {
  std::string a(address);
  if (a.size() >= 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, a.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, a.c_str(), &v6) == 1)
    return a;
  return absl::InvalidArgumentError(
      StrCat("--bind '", address,
             "' is not an IPv4 or IPv6 address (e.g. 127.0.0.1 for this host only, 0.0.0.0 for "
             "every interface, or the address of one interface)"));
}

std::string ListenAddress(const std::string& bind, int port) {
  return bind.find(':') != std::string::npos ? StrCat("[", bind, "]:", port)
                                             : StrCat(bind, ":", port);
}

bool IsWildcardAddress(const std::string& bind) {
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, bind.c_str(), &v4) == 1) return v4.s_addr == htonl(INADDR_ANY);
  return ::inet_pton(AF_INET6, bind.c_str(), &v6) == 1 && IN6_IS_ADDR_UNSPECIFIED(&v6);
}

bool IsLoopbackAddress(const std::string& bind) {
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, bind.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return ::inet_pton(AF_INET6, bind.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool NothingListensAt(std::string_view host_port, int timeout_ms) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string host(host_port.substr(0, colon));
  std::string port(host_port.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return false;
  bool refused = found != nullptr;
  for (addrinfo* a = found; a != nullptr && refused; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      refused = false;
      break;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, timeout_ms) == 1) {
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    ::close(fd);
    refused = err == ECONNREFUSED;
  }
  ::freeaddrinfo(found);
  return refused;
}

}  // namespace stoker::service
