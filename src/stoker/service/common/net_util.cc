#include "stoker/service/common/net_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
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

}  // namespace stoker::service
