#include "stoker/service/common/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "stoker/core/fd_io.h"
#include "stoker/core/logging.h"
#include "stoker/core/metrics.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/format/crc32c.h"

namespace stoker::service {
namespace {

constexpr size_t kMaxPayload = size_t{1} << 30;

// The record starting at `pos`: its payload and the byte after its newline; nullopt when the bytes
// there are not a whole, valid record.
struct Record {
  std::string_view payload;
  size_t end;
};
std::optional<Record> ParseRecord(std::string_view file, size_t pos) {
  std::string_view rest = file.substr(pos);
  size_t i = 0;
  uint64_t length = 0;
  while (i < rest.size() && i < 11 && rest[i] >= '0' && rest[i] <= '9') {
    length = length * 10 + (rest[i] - '0');
    ++i;
  }
  if (i == 0 || i > 10 || length > kMaxPayload || i >= rest.size() || rest[i] != ' ') {
    return std::nullopt;
  }
  ++i;
  if (rest.size() < i + 9 || rest[i + 8] != ' ') return std::nullopt;
  uint32_t crc = 0;
  for (size_t k = 0; k < 8; ++k) {
    const char c = rest[i + k];
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    crc = (crc << 4) | static_cast<uint32_t>(digit);
  }
  i += 9;
  if (rest.size() < i + length + 1 || rest[i + length] != '\n') return std::nullopt;
  std::string_view payload = rest.substr(i, length);
  if (format::crc32c::Value(payload) != crc) return std::nullopt;
  return Record{payload, pos + i + length + 1};
}

absl::StatusOr<std::string> ReadFile(int fd, const std::string& path) {
  std::string text;
  char chunk[1 << 16];
  off_t offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, chunk, sizeof(chunk), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(StrCat("journal ", path, ": read: ", strerror(errno)));
    if (n == 0) return text;
    text.append(chunk, static_cast<size_t>(n));
    offset += n;
  }
}

}  // namespace

std::string Journal::EncodeRecord(std::string_view payload) {
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", format::crc32c::Value(payload));
  return StrCat(payload.size(), " ", crc, " ", payload, "\n");
}

std::vector<std::string_view> Journal::ScanRecords(std::string_view file, size_t* valid_end) {
  std::vector<std::string_view> payloads;
  size_t pos = 0;
  while (pos < file.size()) {
    std::optional<Record> record = ParseRecord(file, pos);
    if (!record) break;
    payloads.push_back(record->payload);
    pos = record->end;
  }
  *valid_end = pos;
  return payloads;
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(StrCat("cannot create work dir ", dir, ": ", ec.message()));
  if (std::filesystem::exists(dir + "/journal.jsonl")) {
    return absl::FailedPreconditionError(
        StrCat(dir,
               "/journal.jsonl is a journal of an older stoker (without checksums); move the "
               "work dir aside to start afresh"));
  }
  std::string path = dir + "/journal.log";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(StrCat("cannot open journal ", path, ": ", strerror(errno)));
  std::unique_ptr<Journal> journal(new Journal(path, fd));
  ASSIGN_OR_RETURN(std::string text, ReadFile(fd, path));
  size_t valid_end = 0;
  ScanRecords(text, &valid_end);
  if (valid_end == text.size()) return journal;
  // Damage. A torn write leaves it at the end only; valid records after it mean the file was
  // damaged in the middle, and cutting there would drop updates that were acknowledged.
  for (size_t nl = text.find('\n', valid_end); nl != std::string::npos;
       nl = text.find('\n', nl + 1)) {
    if (ParseRecord(text, nl + 1)) {
      return absl::DataLossError(StrCat("journal ", path, ": the record at byte ", valid_end,
                                        " is damaged, but valid records "
                                        "follow it (at byte ",
                                        nl + 1,
                                        "); the file is corrupt in the middle, not torn at its "
                                        "end. Move the work dir aside to start afresh"));
    }
  }
  if (::ftruncate(fd, static_cast<off_t>(valid_end)) != 0 || ::fdatasync(fd) != 0) {
    return absl::InternalError(
        StrCat("journal ", path, ": cannot cut off its torn tail: ", strerror(errno)));
  }
  SPDLOG_WARN(
      "journal {}: cut off a torn or corrupt tail of {} bytes at byte {} (a crash while "
      "writing); {} bytes of whole records kept",
      path, text.size() - valid_end, valid_end, valid_end);
  return journal;
}

Journal::~Journal() { ::close(fd_); }

absl::StatusOr<std::vector<nlohmann::json>> Journal::ReadAll() const {
  ASSIGN_OR_RETURN(std::string text, ReadFile(fd_, path_));
  size_t valid_end = 0;
  std::vector<std::string_view> payloads = ScanRecords(text, &valid_end);
  if (valid_end != text.size()) {
    return absl::DataLossError(StrCat("journal ", path_, ": damaged record at byte ", valid_end,
                                      "; move the work dir aside to start afresh"));
  }
  std::vector<nlohmann::json> updates;
  updates.reserve(payloads.size());
  for (std::string_view payload : payloads) {
    auto j = nlohmann::json::parse(payload, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::DataLossError(
          StrCat("journal ", path_, ": record ", updates.size() + 1,
                 " is not a JSON object; move the work dir aside to start afresh"));
    }
    updates.push_back(std::move(j));
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
    const auto start = std::chrono::steady_clock::now();
    const int rc = ::fdatasync(fd_);
    const int err = errno;
    static Histogram& sync_seconds = MetricsRegistry::Default().GetHistogram(
        "stoker_dispatcher_journal_sync_seconds",
        "Time of one journal fdatasync (one serves every RPC waiting then)",
        LatencyBucketsSeconds());
    sync_seconds.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
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
  std::string record = EncodeRecord(update.dump());
  if (int error = WriteAll(fd_, record); error != 0) {
    return absl::InternalError(StrCat("journal ", path_, ": write: ", strerror(error)));
  }
  return written_.fetch_add(1) + 1;
}

}  // namespace stoker::service
