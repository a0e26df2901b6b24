#include "stoker/core/fd_io.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

namespace stoker {
namespace {

// Calls `transfer(offset, remaining)` until `size` bytes are done, retrying after EINTR. Returns
// the bytes done, or -errno; with `stop_at_zero` a 0 return is end of file (not an error).
template <typename Transfer>
ssize_t Loop(size_t size, bool stop_at_zero, Transfer transfer) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = transfer(done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) {
      if (stop_at_zero) break;
      return -EIO;
    }
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

int WriteAll(int fd, std::string_view data) {
  ssize_t n = Loop(data.size(), false,
                   [&](size_t at, size_t left) { return ::write(fd, data.data() + at, left); });
  return n < 0 ? static_cast<int>(-n) : 0;
}

int PwriteAll(int fd, std::string_view data, off_t offset) {
  ssize_t n = Loop(data.size(), false, [&](size_t at, size_t left) {
    return ::pwrite(fd, data.data() + at, left, offset + static_cast<off_t>(at));
  });
  return n < 0 ? static_cast<int>(-n) : 0;
}

int SendAll(int socket, std::string_view data) {
  ssize_t n = Loop(data.size(), false, [&](size_t at, size_t left) {
    return ::send(socket, data.data() + at, left, MSG_NOSIGNAL);
  });
  return n < 0 ? static_cast<int>(-n) : 0;
}

ssize_t ReadAll(int fd, char* out, size_t size) {
  return Loop(size, true, [&](size_t at, size_t left) { return ::read(fd, out + at, left); });
}

ssize_t PreadAll(int fd, char* out, size_t size, off_t offset) {
  return Loop(size, true, [&](size_t at, size_t left) {
    return ::pread(fd, out + at, left, offset + static_cast<off_t>(at));
  });
}

int ReadToEnd(int fd, std::string* out) {
  char chunk[64 << 10];
  while (true) {
    ssize_t n = ReadAll(fd, chunk, sizeof(chunk));
    if (n < 0) return static_cast<int>(-n);
    out->append(chunk, static_cast<size_t>(n));
    if (static_cast<size_t>(n) < sizeof(chunk)) return 0;
  }
}

}  // namespace stoker
