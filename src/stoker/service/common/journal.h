// The dispatcher's journal: an append-only file of updates (one JSON object a line) in its work
// directory. An update is written and flushed to disk before any RPC can see its effect, so
// replaying the file rebuilds the state after a crash (see Dispatcher::Update for the order). A torn last line (a crash mid-write) is ignored.
//
// Thread safety: not thread-safe; the owner serialises calls (the dispatcher holds its mutex).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::service {

class Journal {
 public:
  // Opens (creating) DIR/journal.jsonl; DIR is created if missing.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir);
  ~Journal();

  // Every complete update written so far, in order.
  absl::StatusOr<std::vector<nlohmann::json>> ReadAll() const;
  // Writes one update and waits until it is on disk (fdatasync).
  absl::Status Append(const nlohmann::json& update);

  const std::string& path() const { return path_; }

 private:
  Journal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

}  // namespace stoker::service
