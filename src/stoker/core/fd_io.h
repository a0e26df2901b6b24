// Whole reads and writes on file descriptors: the loops every caller of read/write/pread/send
// needs (retry after EINTR, continue after a short transfer), written once. Errors come back as
// errno values so each caller keeps its own message and status code (which file, what to do).
//
// Thread safety: free functions; concurrent calls on one descriptor interleave as the system
// calls do.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace stoker {

// Writes all of `data`. Returns 0, or the errno of the write that failed (EIO if one wrote
// nothing).
int WriteAll(int fd, std::string_view data);
// The same at file offset `offset` with pwrite (the descriptor's position is not used).
int PwriteAll(int fd, std::string_view data, off_t offset);
// The same over a socket with send(MSG_NOSIGNAL): a closed peer is EPIPE, not SIGPIPE.
int SendAll(int socket, std::string_view data);

// Reads `size` bytes into `out`, stopping early only at end of file. Returns the number of bytes
// read (less than `size` only at end of file), or -errno.
ssize_t ReadAll(int fd, char* out, size_t size);
// The same from file offset `offset` with pread (the descriptor's position is not used).
ssize_t PreadAll(int fd, char* out, size_t size, off_t offset);
// Appends everything up to end of file to *out. Returns 0 or errno.
int ReadToEnd(int fd, std::string* out);

}  // namespace stoker
