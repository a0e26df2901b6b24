#include "stoker/service/common/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "stoker/core/fd_io.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::service {

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(StrCat("cannot create work dir ", dir, ": ", ec.message()));
  std::string path = dir + "/journal.jsonl";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(StrCat("cannot open journal ", path, ": ", strerror(errno)));
  return std::unique_ptr<Journal>(new Journal(path, fd));
}

Journal::~Journal() { ::close(fd_); }

absl::StatusOr<std::vector<nlohmann::json>> Journal::ReadAll() const {
  std::ifstream in(path_, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<nlohmann::json> updates;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // torn last write
    auto j = nlohmann::json::parse(text.begin() + pos, text.begin() + nl, nullptr, false);
    if (j.is_discarded())
      return absl::DataLossError(StrCat("journal ", path_, ": unreadable update at byte ", pos,
                                        "; move the work dir aside to start afresh"));
    updates.push_back(std::move(j));
    pos = nl + 1;
  }
  return updates;
}

absl::Status Journal::Append(const nlohmann::json& update) {
  ASSIGN_OR_RETURN(int64_t seq, Write(update));
  return SyncTo(seq);
}

absl::Status Journal::SyncTo(int64_t seq) {
  absl::MutexLock lock(&sync_mu_);
  while (synced_ < seq) {
    if (!sync_error_.ok()) return sync_error_;
    if (syncing_) {  // another caller's fdatasync may cover seq: wait for it, then look again
      auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_) { return !syncing_; };
      sync_mu_.Await(absl::Condition(&idle));
      continue;
    }
    syncing_ = true;
    const int64_t target = written_.load();  // every update written so far
    sync_mu_.Unlock();
    const int rc = ::fdatasync(fd_);
    const int err = errno;
    sync_mu_.Lock();
    syncing_ = false;
    if (rc != 0) {
      sync_error_ = absl::InternalError(StrCat("journal ", path_, ": fdatasync: ", strerror(err)));
    } else {
      synced_ = std::max(synced_, target);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Journal::Write(const nlohmann::json& update) {
  std::string line = update.dump() + "\n";
  if (int error = WriteAll(fd_, line); error != 0) {
    return absl::InternalError(StrCat("journal ", path_, ": write: ", strerror(error)));
  }
  return written_.fetch_add(1) + 1;
}

}  // namespace stoker::service
