// `stoker mount`: serves a MountFs through libfuse3 (docs/mount.md).
//
// Thread safety: RunMount is called once per process, from its main thread, before any other
// thread is started (it may fork).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::fuse {

struct MountOptions {
  std::string url;         // s3://bucket[/prefix], http(s)://host/path/, a local folder
  std::string mountpoint;  // an existing, empty folder
  uint64_t cache_bytes = uint64_t{1} << 30;  // the RAM budget of all open files together
  std::string disk_cache_dir;                // empty: no disk tier
  uint64_t disk_cache_bytes = uint64_t{10} << 30;
  bool foreground = false;
  absl::Duration dir_ttl = absl::Seconds(60);
  int max_threads = 16;  // FUSE request threads
};

// Mounts read-only and serves until unmounted (fusermount3 -u, umount) or SIGINT/SIGTERM.
// Without `foreground`, it returns as soon as the mount is ready (or with the reason it could not
// be mounted) and a detached child process serves it.
absl::Status RunMount(const MountOptions& options);

}  // namespace stoker::fuse
