// TCP sockets on 127.0.0.1 for tests and test servers: the bind/listen/connect boilerplate in one
// place. Thread-safe (no shared state); every returned fd belongs to the caller, who closes it.
#pragma once

#include "absl/status/statusor.h"

namespace stoker::testing {

struct LoopbackListener {
  int fd = -1;   // listening, SOCK_CLOEXEC
  int port = 0;  // the port it is bound to
};

// A socket listening on 127.0.0.1:`port` (0: a free port the kernel picks), with SO_REUSEADDR.
// Unavailable naming the address when it cannot bind or listen.
absl::StatusOr<LoopbackListener> ListenOnLoopback(int port = 0, int backlog = 128);

// A socket connected to 127.0.0.1:`port`, or -1 (errno says why).
int ConnectToLoopback(int port);

// A port on 127.0.0.1 that nothing listened on a moment ago (bound, then closed): for a server a
// test starts itself, or for "nothing listens here". Another process may take it meanwhile.
int FreeLoopbackPort();

}  // namespace stoker::testing
