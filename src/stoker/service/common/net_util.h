// Which local address other hosts reach this one at; the address a server listens on (--bind);
// whether anything listens at an address.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace stoker::service {

// The local IPv4 address this host uses to reach `host_port` ("host:port"): the source address the
// kernel's routing table picks (a UDP socket is connected, nothing is sent). For a dispatcher on
// another host this is the interface on that network, never 127.0.0.1 (unless the dispatcher is
// on loopback). An error naming the address if it cannot be resolved or routed.
absl::StatusOr<std::string> LocalAddressTowards(std::string_view host_port);

// A server's --bind ADDRESS, checked: a numeric IPv4 or IPv6 address ("0.0.0.0", "127.0.0.1",
// "::", "::1", "[::1]"); brackets are dropped. An error naming the flag otherwise (a host name
// would bind whichever of its addresses resolves first: give the address).
absl::StatusOr<std::string> ParseBindAddress(std::string_view address);
// The gRPC listening address of a checked bind address and a port: "0.0.0.0:5000", "[::1]:5000".
std::string ListenAddress(const std::string& bind, int port);
// Whether a checked bind address is every interface (0.0.0.0 or ::) or loopback (127.0.0.0/8 or
// ::1).
bool IsWildcardAddress(const std::string& bind);
bool IsLoopbackAddress(const std::string& bind);

// True if a TCP connection to "host:port" is refused on every address the host resolves to
// (nothing listens there); false if one is accepted, times out (`timeout_ms`) or the host does not
// resolve.
bool NothingListensAt(std::string_view host_port, int timeout_ms = 500);

}  // namespace stoker::service
