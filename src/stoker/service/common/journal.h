// The dispatcher's journal: an append-only file of updates (one JSON object a line) in its work
// directory. An update is written and flushed to disk before any RPC can see its effect, so
// replaying the file rebuilds the state after a crash (see Dispatcher::Update for the order). A
// torn last line (a crash mid-write) is ignored.
//
// Group commit: Write appends without waiting for the disk; SyncTo(seq) waits until every update up
// to seq is on disk, and one fdatasync serves every caller waiting at that moment.
//
// Thread safety: Write and ReadAll calls are serialised by the owner (the dispatcher holds its
// mutex); SyncTo is thread-safe, also while Write runs.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace stoker::service {

class Journal {
 public:
  // Opens (creating) DIR/journal.jsonl; DIR is created if missing.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir);
  ~Journal();

  // Every complete update written so far, in order.
  absl::StatusOr<std::vector<nlohmann::json>> ReadAll() const;
  // Appends one update without waiting for the disk; its sequence number (1, 2, ...).
  absl::StatusOr<int64_t> Write(const nlohmann::json& update);
  // Waits until every update up to `seq` is on disk (fdatasync).
  absl::Status SyncTo(int64_t seq);
  // The sequence number of the last update written.
  int64_t written() const { return written_.load(); }
  // Write + SyncTo.
  absl::Status Append(const nlohmann::json& update);

  const std::string& path() const { return path_; }

 private:
  Journal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  std::atomic<int64_t> written_{0};
  absl::Mutex sync_mu_;
  int64_t synced_ ABSL_GUARDED_BY(sync_mu_) = 0;
  bool syncing_ ABSL_GUARDED_BY(sync_mu_) = false;  // one caller runs fdatasync for all
  absl::Status sync_error_ ABSL_GUARDED_BY(sync_mu_);
};

}  // namespace stoker::service
