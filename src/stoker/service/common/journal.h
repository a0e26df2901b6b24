// The dispatcher's journal: an append-only file of updates in its work directory
// (WORK_DIR/journal.log). An update is written and flushed to disk before any RPC can see its
// effect, so replaying the file rebuilds the state after a crash (see Dispatcher::Update for the
// order).
//
// File format (docs/protocol.md, "The journal"): one record a line,
//   <payload length, decimal> <CRC-32C of the payload, 8 lowercase hex digits> <payload>\n
// where the payload is the update as compact JSON. Open checks every record: a torn or corrupt
// tail (a crash or power loss mid-write) is cut off the file, with a warning in the log saying how
// many bytes; a damaged record followed by valid ones is DataLoss (that is not a torn write).
//
// Group commit: Write appends without waiting for the disk; SyncTo(seq) waits until every update up
// to seq is on disk, and one fdatasync serves every caller waiting at that moment.
//
// Thread safety: Write and ReadAll calls are serialised by the owner (the dispatcher holds its
// mutex); SyncTo is thread-safe, also while Write runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace stoker::service {

class Journal {
 public:
  // Opens (creating) DIR/journal.log; DIR is created if missing. Cuts a torn or corrupt tail off
  // (logged); DataLoss when a damaged record is followed by valid ones; FailedPrecondition when DIR
  // holds a journal of the older format without checksums (journal.jsonl).
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir);
  ~Journal();

  // Every update written so far, in order. DataLoss if a record does not hold a JSON object.
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

  // The record framing, exposed for tests and the fuzzer. EncodeRecord frames one payload;
  // ScanRecords returns the payloads of the valid records at the start of `file` and sets
  // *valid_end to the byte after the last of them (== file.size() when the file is whole).
  static std::string EncodeRecord(std::string_view payload);
  static std::vector<std::string_view> ScanRecords(std::string_view file, size_t* valid_end);

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
