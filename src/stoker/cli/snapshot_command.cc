// stoker snapshot: runs a pipeline on the service and writes its output as a stoker dataset
// (docs/format.md, "Snapshots"; docs/protocol.md, "Snapshots"). The job is an ordinary job whose
// spec names the destination; each worker writes each split it runs as one part and sends an
// element naming it. This command is the job's one consumer: the service's exactly-once delivery
// gives it one committed part per split, which it lists in the progress file as they arrive, then
// in manifest.json at the end, deleting the parts of attempts that lost.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stoker/cli/commands.h"
#include "stoker/cli/service_cli.h"
#include "stoker/core/log_setup.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/snapshot.h"
#include "stoker/io/url.h"
#include "stoker/service/client/client.h"

namespace stoker::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct SnapshotOptions {
  std::string dispatcher;
  std::string spec;
  std::string dst;
  int64_t epochs = 1;
  int64_t first_epoch = 0;
  double no_worker_timeout_s = 0;
  int heartbeat_ms = 200;
  std::string log_format = "text";
  service::SecurityOptions security;
};

// The part an element from a worker names (see Worker::WriteSnapshotPart).
absl::StatusOr<data::SnapshotPart> PartOf(const data::Element& e) {
  data::SnapshotPart part;
  ASSIGN_OR_RETURN(const data::Tensor* name, e.Field("part"));
  ASSIGN_OR_RETURN(const data::Tensor* records, e.Field("records"));
  ASSIGN_OR_RETURN(const data::Tensor* bytes, e.Field("bytes"));
  ASSIGN_OR_RETURN(const data::Tensor* fields, e.Field("fields"));
  part.name = name->data.ToString();
  ASSIGN_OR_RETURN(int64_t n, data::ScalarAsInt(*records));
  ASSIGN_OR_RETURN(int64_t b, data::ScalarAsInt(*bytes));
  part.records = static_cast<uint64_t>(n);
  part.bytes = static_cast<uint64_t>(b);
  std::stringstream list(fields->data.ToString());
  for (std::string f; std::getline(list, f, '\0');) part.fields.insert(f);
  return part;
}

// The progress file, rewritten by a thread of its own at most every 200 ms while parts arrive
// (so its writes cost O(parts x seconds), not O(parts^2)), and once more at the end.
class ProgressFile {
 public:
  explicit ProgressFile(std::string dst) : dst_(std::move(dst)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressFile() { Stop(); }
  // The first error of a write so far, else OK.
  absl::Status Add(data::SnapshotPart part) {
    std::lock_guard<std::mutex> lock(mu_);
    parts_.push_back(std::move(part));
    dirty_ = true;
    cv_.notify_one();
    return error_;
  }
  // Stops the thread after a last write; returns every part added.
  absl::StatusOr<std::vector<data::SnapshotPart>> Finish() {
    Stop();
    RETURN_IF_ERROR(error_);
    return parts_;
  }

 private:
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      cv_.notify_one();
    }
    thread_.join();
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return dirty_ || stopping_; });
      if (dirty_ && error_.ok()) {
        std::vector<data::SnapshotPart> parts = parts_;
        dirty_ = false;
        const bool pace = !stopping_;
        lock.unlock();
        absl::Status s = data::WriteSnapshotProgress(dst_, parts);
        if (pace) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        lock.lock();
        if (!s.ok() && error_.ok()) error_ = s;
        continue;
      }
      if (stopping_) return;
    }
  }

  const std::string dst_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<data::SnapshotPart> parts_;
  bool dirty_ = false;
  bool stopping_ = false;
  absl::Status error_;
  std::thread thread_;
};

absl::Status WriteSnapshot(const SnapshotOptions& o, const std::string& spec,
                           const std::string& dst);

absl::Status RunSnapshot(const SnapshotOptions& o) {
  RETURN_IF_ERROR(SetLogFormat(o.log_format));
  std::ifstream in(o.spec, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read spec file ", o.spec));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json spec = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object())
    return absl::InvalidArgumentError(StrCat(o.spec, ": the pipeline spec is not a JSON object"));
  if (spec.contains("snapshot"))
    return absl::InvalidArgumentError(
        StrCat(o.spec, ": $.snapshot is set by `stoker snapshot` itself; leave it out"));
  // The workers open DST themselves, from their own working folder: a local path is made
  // absolute (it must be the same folder on every worker's machine, e.g. a shared file system).
  std::string dst = o.dst;
  if (dst.find("://") == std::string::npos) dst = std::filesystem::absolute(dst).string();
  RETURN_IF_ERROR(data::CheckSnapshotDestination(dst));
  RETURN_IF_ERROR(data::WriteSnapshotProgress(dst, {}));
  spec["snapshot"] = {{"url", dst}};
  absl::Status status = WriteSnapshot(o, spec.dump(), dst);
  // Readers waiting for parts learn at once that no more will come.
  if (!status.ok()) data::WriteSnapshotError(dst, std::string(status.message()));
  return status;
}

// Runs the snapshot job and lists what arrives (RunSnapshot checked DST and started it).
absl::Status WriteSnapshot(const SnapshotOptions& o, const std::string& spec,
                           const std::string& dst) {
  ProgressFile progress(dst);

  KeepDataPathAllocationsOnHeap();
  service::ServiceClientOptions options;
  options.dispatcher_address = o.dispatcher;
  service::SetClientSecurity(&options, o.security);
  options.num_epochs = o.epochs;
  options.first_epoch = o.first_epoch;
  options.deterministic = true;  // parts listed in the job's order: the pipeline's order
  options.no_worker_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(o.no_worker_timeout_s * 1000));
  options.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
  const auto start = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<service::ServiceClient> client,
                   service::ServiceClient::Open(options, spec));
  std::set<std::string> names;
  uint64_t records = 0, bytes = 0;
  while (true) {
    absl::StatusOr<std::optional<data::Element>> e = client->GetNext();
    if (!e.ok())
      return Annotate(e.status(), StrCat("snapshot ", dst, " (incomplete: no ",
                                         "manifest.json; write it again to a new destination)"));
    if (!*e) {
      std::fprintf(stderr, "snapshot %s: epoch %lld done, %zu parts so far\n", dst.c_str(),
                   static_cast<long long>(client->epoch()), names.size());
      if (!client->AdvanceEpoch()) break;
      continue;
    }
    ASSIGN_OR_RETURN(data::SnapshotPart part, PartOf(**e));
    if (!names.insert(part.name).second)
      return absl::InternalError(StrCat("snapshot ", dst, ": part ", part.name, " came twice"));
    // The part is committed before its element was sent; check that it is there as described.
    const std::string url = io::JoinUrl(dst, part.name);
    absl::StatusOr<io::StoreAndKey> at = io::OpenUrl(url);
    if (!at.ok()) return at.status();
    absl::StatusOr<io::ObjectInfo> info = at->store->Stat(at->key);
    if (!info.ok()) return Annotate(info.status(), StrCat("snapshot part ", url));
    if (info->size != part.bytes)
      return absl::DataLossError(StrCat("snapshot part ", url, " holds ", info->size,
                                        " bytes; its worker reported ", part.bytes));
    records += part.records;
    bytes += part.bytes;
    RETURN_IF_ERROR(progress.Add(std::move(part)));
  }
  ASSIGN_OR_RETURN(std::vector<data::SnapshotPart> parts, progress.Finish());
  ASSIGN_OR_RETURN(int64_t deleted, data::FinishSnapshot(dst, parts));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr,
               "snapshot %s: %zu parts, %llu elements, %.1f MB in %.2f s; %lld other object(s) "
               "deleted (parts of attempts that lost, temporary files, the progress file)\n",
               dst.c_str(), parts.size(), static_cast<unsigned long long>(records), bytes / 1e6,
               seconds, static_cast<long long>(deleted));
  return absl::OkStatus();
}

}  // namespace

void RegisterSnapshotCommand(CLI::App& app, absl::Status* result) {
  // Static, so the parsed options outlive parsing without a heap object the leak checker flags.
  static SnapshotOptions snapshot_options;
  auto* c = app.add_subcommand(
      "snapshot",
      "Run a pipeline on the service and write its output (the elements of --epochs epochs) as "
      "a stoker dataset at DST, which a later job reads with {\"dataset\": DST} instead of "
      "computing it again. Workers write one part per split in parallel; a split whose worker "
      "died is written again and only one part per split is kept. While it runs, "
      "{\"dataset\": DST, \"wait\": true} reads the parts written so far and waits for the rest; "
      "DST is complete once it holds manifest.json. DST (a local folder, reachable at the same "
      "path by every worker, or an s3:// prefix) must be empty.");
  c->add_option("SPEC", snapshot_options.spec, "pipeline spec (JSON file)")->required();
  c->add_option("DST", snapshot_options.dst, "destination: an empty local folder or s3:// prefix")
      ->required();
  c->add_option("--dispatcher", snapshot_options.dispatcher,
                "the dispatcher's HOST:PORT (or grpc://HOST:PORT)")
      ->required();
  c->add_option("--epochs", snapshot_options.epochs,
                "epochs to write, one after another (default 1)")
      ->check(CLI::PositiveNumber);
  c->add_option("--first-epoch", snapshot_options.first_epoch,
                "the first epoch written: its order and augmentation (default 0)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--no-worker-timeout", snapshot_options.no_worker_timeout_s,
                "fail after this many seconds without any registered worker (default: wait, "
                "logging every 10 s)");
  c->add_option("--heartbeat-ms", snapshot_options.heartbeat_ms,
                "heartbeat interval (default 200)");
  AddLogOptions(c, &snapshot_options.log_format, "warn");
  AddSecurityOptions(c, &snapshot_options.security, kDials, /*worker=*/false);
  c->callback([=] { *result = RunSnapshot(snapshot_options); });
}

}  // namespace stoker::cli
