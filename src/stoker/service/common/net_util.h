// Which local address other hosts reach this one at.
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

}  // namespace stoker::service
