// Where a Buffer's bytes lie in a file this process has mapped read-only, so that another process
// on this host can map the same page-cache pages instead of receiving a copy of them (the
// worker's shared-memory hand-off names the file; docs/protocol.md, "Shared memory").
//
// The owner of a read-only file mapping registers it for as long as the mapping exists, with a
// descriptor of the file that it keeps open for as long, and unregisters it before unmapping.
// Buffers sliced from a mapping keep it alive (their owner holds it), so a lookup of a live
// Buffer's bytes finds an entry whose descriptor is open at least as long as that Buffer lives.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>

namespace stoker {

struct MappedFileSlice {
  int fd = -1;  // this process's descriptor of the file (open while the mapping lives)
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t file_size = 0;  // bytes mapped, from offset 0 of the file
  uint64_t offset = 0;     // of the slice's first byte in the file
};

// Registers the mapping of [0, size) of the file open as `fd` at `base`.
void RegisterMappedFile(const uint8_t* base, uint64_t size, int fd, uint64_t device,
                        uint64_t inode);
// Unregisters the mapping at `base` (before it is unmapped).
void UnregisterMappedFile(const uint8_t* base);
// The file holding [data, data + size), if one registered mapping covers all of it.
std::optional<MappedFileSlice> FindMappedFile(const uint8_t* data, uint64_t size);

}  // namespace stoker
