// stoker ls / cat / cp: the object-store layer from the shell.
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/cli/commands.h"
#include "stoker/cli/progress.h"
#include "stoker/core/fd_io.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread_pool.h"
#include "stoker/io/local/local_store.h"
#include "stoker/io/read/range_plan.h"
#include "stoker/io/read/ranged_reader.h"
#include "stoker/io/store_factories.h"
#include "stoker/io/url.h"

namespace stoker::cli {
namespace {

absl::Status OutputError(int error) {
  if (error == 0) return absl::OkStatus();
  return absl::UnavailableError(StrCat("cannot write to standard output: ", strerror(error)));
}

absl::Status WriteAll(int fd, const Buffer& data) {
  return OutputError(stoker::WriteAll(fd, data.view()));
}

// Standard output as `stoker cat` writes it: a pipe is enlarged to 1 MiB (when the system allows),
// so writer and reader wake each other 16 times less often than with the default 64 KiB. The parts
// are written with write(), not handed to the pipe with vmsplice: the pipe would then refer to
// pages that go back to the buffer pool and are overwritten by later parts, and a reader that
// splices onward (pv into another pipe, a proxy into a socket) keeps referring to them after it
// has "read" them, so it could pass on bytes of a later part (docs/io.md).
void PrepareStandardOutput() {
  struct stat st;
  if (fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode)) {
    fcntl(STDOUT_FILENO, F_SETPIPE_SZ, 1 << 20);
  }
}

// `stoker ls s3://`: the buckets, as `aws s3 ls` prints them.
absl::Status LsBuckets() {
  ASSIGN_OR_RETURN(std::vector<io::ObjectInfo> buckets, io::ListS3BucketsFromEnvironment());
  for (const io::ObjectInfo& bucket : buckets) {
    std::printf("%12s  %s  s3://%s/\n", "BUCKET",
                absl::FormatTime("%Y-%m-%d %H:%M:%S", bucket.mtime, absl::UTCTimeZone()).c_str(),
                bucket.key.c_str());
  }
  return absl::OkStatus();
}

absl::Status Ls(const std::string& url, bool recursive) {
  if (url == "s3://" || url == "s3:///") return LsBuckets();
  ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(url));
  // A URL naming one object lists that object; otherwise list the "folder".
  std::string prefix = target.key;
  if (!prefix.empty() && !prefix.ends_with("/")) {
    auto info = target.store->Stat(prefix);
    if (info.ok()) {
      std::printf("%12llu  %s  %s\n", static_cast<unsigned long long>(info->size),
                  absl::FormatTime("%Y-%m-%d %H:%M:%S", info->mtime, absl::UTCTimeZone()).c_str(),
                  target.store->Url(info->key).c_str());
      return absl::OkStatus();
    }
    prefix += "/";
  }
  ASSIGN_OR_RETURN(io::ListResult listing, target.store->List({prefix, recursive ? "" : "/", 0}));
  for (const std::string& folder : listing.common_prefixes) {
    std::printf("%12s  %19s  %s\n", "DIR", "", target.store->Url(folder).c_str());
  }
  for (const io::ObjectInfo& info : listing.objects) {
    std::printf("%12llu  %s  %s\n", static_cast<unsigned long long>(info.size),
                absl::FormatTime("%Y-%m-%d %H:%M:%S", info.mtime, absl::UTCTimeZone()).c_str(),
                target.store->Url(info.key).c_str());
  }
  return absl::OkStatus();
}

// The part size for streaming from a store whose request round trip took `round_trip` (the Stat,
// connection set-up included): at least what one connection moves in a round trip at 90 MB/s (the
// S3 figure of ReaderOptions), so a part's time to first byte is at most half its time, rounded up
// to a power of two between 4 MiB and options.part_size. Over the loopback or a LAN (round trips up
// to ~40 ms) parts are 4 MiB: 16 in flight are 64 MiB of buffers, recycled by the buffer pool.
// Measured interleaved with one `curl -Z --parallel-max 16` (512 MiB from nginx, 7 rounds, load
// 1.5, medians): 1 MiB parts 0.59 s and 0.33 CPU-s (512 requests), 4 MiB 0.53 s and 0.36 CPU-s,
// curl 0.34 s and 0.32 CPU-s; 8 MiB parts cost more CPU than curl in quick runs (36,000 minor
// faults per 512 MiB against 19,700 at 4 MiB and 7,500 at 1 MiB: fresh pages). Past ~50 ms, 8 MiB.
uint64_t PartSizeForLatency(absl::Duration round_trip, const io::ReaderOptions& options) {
  constexpr double kConnectionBytesPerSecond = 90e6;
  constexpr uint64_t kMinPart = 4 << 20;
  double wanted = absl::ToDoubleSeconds(round_trip) * kConnectionBytesPerSecond;
  uint64_t part = kMinPart;
  while (part < options.part_size && static_cast<double>(part) < wanted) part *= 2;
  return std::max<uint64_t>(std::min(part, options.part_size), 1);
}

// How many parts `stoker cat` into a file starts with in flight (of at most `max`), from the
// Stat's round trip (connection set-up included). Under 2 ms (the same host or a LAN) a part waits
// little for its first byte and one transport thread receives every byte, so two parts keep it
// busy; more add connections whose server threads (on the same host: on the same cores) and
// receive buffers compete with it. PartWindow then opens more while that raises the rate (a server
// whose connections are slow). A longer round trip starts at `max`: the parts hide the latency.
int InitialPartsInFlight(absl::Duration round_trip, int max) {
  return round_trip < absl::Milliseconds(2) ? std::min(2, max) : max;
}

// The parts of a range of an object, as StreamObject and WriteObjectInPlace fetch them.
struct PartPlan {
  io::ObjectInfo info;  // from Stat: every part is pinned to info.etag
  uint64_t begin = 0;   // the range, cut at the object's end
  uint64_t end = 0;
  uint64_t part = 0;  // bytes per part (the last may be shorter)
  size_t parts = 0;
  absl::Duration round_trip;  // of the Stat, connection set-up included
};

// Stats the object and splits `range` into parts of options.part_size bytes, or with
// `size_parts_by_latency` sized by the round trip of that Stat (see PartSizeForLatency).
absl::StatusOr<PartPlan> PlanParts(io::ObjectStore& store, std::string_view key,
                                   io::ByteRange range, const io::ReaderOptions& options,
                                   bool size_parts_by_latency) {
  absl::Time stat_start = absl::Now();
  PartPlan plan;
  ASSIGN_OR_RETURN(plan.info, store.Stat(key));
  if (range.offset > plan.info.size) {
    return absl::OutOfRangeError(StrCat("offset ", range.offset, " is past the end of ",
                                        store.Url(key), " (", plan.info.size, " bytes)"));
  }
  plan.round_trip = absl::Now() - stat_start;
  plan.begin = range.offset;
  plan.end = std::min<uint64_t>(range.end(), plan.info.size);
  plan.part =
      size_parts_by_latency ? PartSizeForLatency(plan.round_trip, options) : options.part_size;
  plan.parts = static_cast<size_t>((plan.end - plan.begin + plan.part - 1) / plan.part);
  return plan;
}

// Streams `range` of an object to `sink` in order (on the calling thread), in the parts of
// PlanParts, fetching up to `window` parts concurrently. All parts are pinned to the ETag seen by
// Stat, so a concurrent overwrite fails the copy instead of mixing versions.
absl::Status StreamObject(io::RangedReader& reader, std::string_view key, io::ByteRange range,
                          const std::function<absl::Status(Buffer)>& sink, int window = 16,
                          bool size_parts_by_latency = false) {
  ASSIGN_OR_RETURN(PartPlan plan,
                   PlanParts(reader.store(), key, range, reader.options(), size_parts_by_latency));
  absl::Mutex mu;
  std::vector<std::optional<absl::StatusOr<Buffer>>> results(plan.parts);
  size_t issued = 0;
  for (size_t written = 0; written < plan.parts; ++written) {
    for (; issued < plan.parts && issued < written + static_cast<size_t>(window); ++issued) {
      uint64_t offset = plan.begin + issued * plan.part;
      reader.ReadRangesAsync(std::string(key), {{offset, std::min(plan.part, plan.end - offset)}},
                             plan.info.etag,
                             [&mu, &results, i = issued](absl::StatusOr<std::vector<Buffer>> r) {
                               absl::MutexLock lock(&mu);
                               if (r.ok()) {
                                 results[i] = std::move((*r)[0]);
                               } else {
                                 results[i] = r.status();
                               }
                             });
    }
    absl::StatusOr<Buffer> next;
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](std::optional<absl::StatusOr<Buffer>>* slot) { return slot->has_value(); },
          &results[written]));
      next = std::move(*results[written]);
      results[written].reset();
    }
    absl::Status status = next.ok() ? sink(*std::move(next)) : next.status();
    if (!status.ok()) {
      // Let the reads still in flight land before `results` goes away.
      absl::MutexLock lock(&mu);
      for (size_t i = written + 1; i < issued; ++i) {
        mu.Await(absl::Condition(
            +[](std::optional<absl::StatusOr<Buffer>>* slot) { return slot->has_value(); },
            &results[i]));
      }
      return status;
    }
  }
  return absl::OkStatus();
}

// Whether `fd` takes writes at any offset: a regular file not opened for appending, or the null
// device. Then its position (where `stoker cat` starts writing) is returned.
std::optional<uint64_t> PositionalOutput(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return std::nullopt;
  const bool null_device = S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
  if (!S_ISREG(st.st_mode) && !null_device) return std::nullopt;
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_APPEND) != 0) return std::nullopt;
  off_t position = lseek(fd, 0, SEEK_CUR);
  if (position < 0) return std::nullopt;
  return static_cast<uint64_t>(position);
}

// Writes `range` of an object into `fd` from file offset `position` on, each part with pwrite
// straight from the store's responses as they arrive (ObjectStore::ReadToAsync: no part buffers,
// no copy), up to `in_flight` parts at a time (over a short round trip fewer, as long as more do
// not help: InitialPartsInFlight, PartWindow), in the parts of PlanParts pinned to one ETag. The
// file fills out of order; when all is written, the descriptor's position is moved past it (so
// `{ stoker cat a; stoker cat b; } > f` concatenates). On an error, what was written stays.
absl::Status WriteObjectInPlace(io::ObjectStore& store, std::string_view key, io::ByteRange range,
                                const io::ReaderOptions& options, int fd, uint64_t position,
                                int in_flight) {
  ASSIGN_OR_RETURN(PartPlan plan, PlanParts(store, key, range, options,
                                            /*size_parts_by_latency=*/true));
  struct State {
    explicit State(int initial, int max) : window(initial, max) {}
    absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    io::PartWindow window ABSL_GUARDED_BY(mu);
    absl::Status error ABSL_GUARDED_BY(mu);
  } state(InitialPartsInFlight(plan.round_trip, in_flight), in_flight);
  for (size_t i = 0; i < plan.parts; ++i) {
    {
      absl::MutexLock lock(&state.mu);
      auto room = [&]() ABSL_SHARED_LOCKS_REQUIRED(state.mu) {
        return state.in_flight < state.window.window() || !state.error.ok();
      };
      state.mu.Await(absl::Condition(&room));
      if (!state.error.ok()) break;
      ++state.in_flight;
    }
    const uint64_t offset = plan.begin + i * plan.part;
    const uint64_t length = std::min(plan.part, plan.end - offset);
    const off_t at = static_cast<off_t>(position + (offset - plan.begin));
    store.ReadToAsync(
        io::ReadRequest{std::string(key), {offset, length}, plan.info.etag},
        [fd, at](uint64_t from, std::string_view data) {
          return OutputError(PwriteAll(fd, data, at + static_cast<off_t>(from)));
        },
        [&state, length, offset, url = store.Url(key)](absl::StatusOr<uint64_t> written) {
          absl::MutexLock lock(&state.mu);
          --state.in_flight;
          if (!state.error.ok()) return;
          if (!written.ok()) {
            state.error = written.status();
          } else if (*written == length) {
            state.window.PartDone(length, absl::Now());
          } else {
            state.error = absl::DataLossError(
                StrCat("reading bytes ", offset, "-", offset + length - 1, " of ", url, ": got ",
                       *written, " bytes; the object changed during the read"));
          }
        });
  }
  absl::MutexLock lock(&state.mu);
  state.mu.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &state.in_flight));
  RETURN_IF_ERROR(state.error);
  lseek(fd, static_cast<off_t>(position + (plan.end - plan.begin)), SEEK_SET);
  return absl::OkStatus();
}

absl::Status Cat(const std::string& url, uint64_t offset, int64_t length) {
  // Keep freed memory mapped: glibc otherwise hands the top of the transport thread's heap back
  // to the kernel (madvise DONTNEED) every time it frees a few MiB there, and the next responses
  // fault those pages in again (up to 50,000 minor faults per 512 MiB). This process only streams,
  // so what it keeps is bounded by the parts in flight.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(url));
  io::RangedReader reader(source.store);
  io::ByteRange range{offset, length < 0 ? io::ByteRange::kToEnd : static_cast<uint64_t>(length)};
  if (std::optional<uint64_t> position = PositionalOutput(STDOUT_FILENO)) {
    return WriteObjectInPlace(*source.store, source.key, range, reader.options(), STDOUT_FILENO,
                              *position, /*in_flight=*/16);
  }
  PrepareStandardOutput();
  return StreamObject(
      reader, source.key, range, [](Buffer part) { return WriteAll(STDOUT_FILENO, part); },
      /*window=*/16,
      /*size_parts_by_latency=*/true);
}

// Copies one object, streaming it in parallel parts; the destination appears only once complete.
absl::Status CopyObject(const std::shared_ptr<io::ObjectStore>& from_store,
                        const std::string& from_key, io::ObjectStore& to_store,
                        const std::string& to_key, Progress* progress) {
  ASSIGN_OR_RETURN(auto writer, to_store.OpenWriter(to_key));
  io::RangedReader reader(from_store);
  RETURN_IF_ERROR(StreamObject(reader, from_key, {}, [&](Buffer part) {
    progress->Add(static_cast<int64_t>(part.size()));
    return writer->Append(std::move(part));
  }));
  RETURN_IF_ERROR(writer->Close());
  progress->Add(0, 1);
  return absl::OkStatus();
}

struct CopyOptions {
  ProgressMode progress = ProgressMode::kAuto;
  int jobs = 8;
};

absl::Status Cp(const std::string& from, const std::string& to, const CopyOptions& options) {
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(from));
  absl::StatusOr<io::ObjectInfo> info = source.store->Stat(source.key);
  if (!info.ok()) {
    // A folder or prefix: say how to copy it instead of "not found".
    std::string prefix =
        source.key.empty() || source.key.ends_with("/") ? source.key : source.key + "/";
    auto below = source.store->List({prefix, "/", 1});
    if (below.ok() && (!below->objects.empty() || !below->common_prefixes.empty())) {
      return absl::InvalidArgumentError(StrCat(
          from, " is a folder or prefix: copy it with `stoker cp --recursive` or `stoker sync`"));
    }
  }
  RETURN_IF_ERROR(info.status());
  std::string destination_url = to;
  if (to.ends_with("/")) {
    size_t slash = source.key.rfind('/');
    destination_url += source.key.substr(slash == std::string::npos ? 0 : slash + 1);
  }
  ASSIGN_OR_RETURN(io::StoreAndKey destination, io::OpenUrl(destination_url));
  Progress progress("cp", "files", options.progress);
  progress.SetTotals(static_cast<int64_t>(info->size), 1);
  return CopyObject(source.store, source.key, *destination.store, destination.key, &progress);
}

// Every object below `url` (a prefix or folder), by its name relative to it. A missing folder or
// prefix is empty. Folder markers (keys ending in '/') are left out.
struct Tree {
  io::StoreAndKey root;  // root.key is "" or ends with '/'
  std::map<std::string, io::ObjectInfo> objects;
};

absl::StatusOr<Tree> ListTree(const std::string& url) {
  Tree tree;
  ASSIGN_OR_RETURN(tree.root, io::OpenUrl(url));
  std::string& prefix = tree.root.key;
  if (!prefix.empty() && !prefix.ends_with("/")) prefix += "/";
  absl::StatusOr<io::ListResult> listing = tree.root.store->List({prefix, "", 0});
  if (absl::IsNotFound(listing.status())) return tree;
  RETURN_IF_ERROR(listing.status());
  for (io::ObjectInfo& info : listing->objects) {
    if (info.key.ends_with("/") || info.key.size() <= prefix.size()) continue;
    std::string relative = info.key.substr(prefix.size());
    tree.objects.emplace(std::move(relative), std::move(info));
  }
  return tree;
}

// sync's rule (as `aws s3 sync`): copy when the destination is missing or has another size;
// between two S3 objects with ETags, when the ETags differ; otherwise when the source is newer by
// whole seconds (S3 keeps whole seconds, local files nanoseconds).
bool NeedsCopy(const io::ObjectInfo& from, const io::ObjectInfo* to, bool both_s3) {
  if (to == nullptr || from.size != to->size) return true;
  if (both_s3 && !from.etag.empty() && !to->etag.empty()) return from.etag != to->etag;
  return absl::ToUnixSeconds(from.mtime) > absl::ToUnixSeconds(to->mtime);
}

// Gives a copied local file its source's modification time (as `aws s3 sync` does), so that a
// later sync compares the source with itself: a file written in the same second as its source,
// whose LastModified S3 rounds up to the next second, would otherwise look older than it.
absl::Status KeepModificationTime(const std::string& path, absl::Time mtime) {
  const timespec t = absl::ToTimespec(mtime);
  const timespec times[2] = {t, t};
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) {
    return absl::ErrnoToStatus(errno, StrCat("cannot set the modification time of ", path));
  }
  return absl::OkStatus();
}

// cp --recursive (every object) and sync (only those NeedsCopy selects): `options.jobs` objects
// are copied at once. A failed object is reported and the others go on; the result names how
// many failed.
absl::Status CopyTree(const std::string& from, const std::string& to, bool sync,
                      const CopyOptions& options) {
  const char* command = sync ? "sync" : "cp";
  ASSIGN_OR_RETURN(Tree source, ListTree(from));
  ASSIGN_OR_RETURN(Tree destination, ListTree(to));
  const bool both_s3 = from.starts_with("s3://") && to.starts_with("s3://");
  const auto* local_destination = dynamic_cast<const io::LocalStore*>(destination.root.store.get());
  std::vector<const std::pair<const std::string, io::ObjectInfo>*> todo;
  int64_t bytes = 0, up_to_date = 0;
  for (const auto& entry : source.objects) {
    auto found = destination.objects.find(entry.first);
    const io::ObjectInfo* existing = found == destination.objects.end() ? nullptr : &found->second;
    if (sync && !NeedsCopy(entry.second, existing, both_s3)) {
      ++up_to_date;
      continue;
    }
    todo.push_back(&entry);
    bytes += static_cast<int64_t>(entry.second.size);
  }
  const absl::Time start = absl::Now();
  Progress progress(command, "files", options.progress);
  progress.SetTotals(bytes, static_cast<int64_t>(todo.size()));
  absl::Mutex mu;
  int failed = 0;
  std::string first_error;
  {
    ThreadPool pool(StrCat(command, "-copy"), std::max(1, options.jobs));
    for (const auto* entry : todo) {
      pool.Schedule([&, entry] {
        const std::string& relative = entry->first;
        const std::string key = destination.root.key + relative;
        absl::Status status = CopyObject(source.root.store, entry->second.key,
                                         *destination.root.store, key, &progress);
        if (status.ok() && local_destination != nullptr) {
          status = KeepModificationTime(local_destination->Url(key), entry->second.mtime);
        }
        if (!status.ok()) {
          absl::MutexLock lock(&mu);
          ++failed;
          if (first_error.empty()) first_error = std::string(status.message());
          std::fprintf(stderr, "%s: failed: %s -> %s: %s\n", command,
                       source.root.store->Url(entry->second.key).c_str(),
                       destination.root.store->Url(destination.root.key + relative).c_str(),
                       std::string(status.message()).c_str());
        }
      });
    }
  }
  progress.Finish();
  std::fprintf(stderr, "%s: %zu of %zu objects copied (%s)%s in %.2f s\n", command,
               todo.size() - failed, source.objects.size(), HumanBytes(bytes).c_str(),
               sync ? StrCat(", ", up_to_date, " up to date").c_str() : "",
               absl::ToDoubleSeconds(absl::Now() - start));
  if (failed > 0) {
    return absl::UnavailableError(StrCat(failed, " of ", todo.size(), " copies failed (first: ",
                                         first_error, "); run the command again to retry them"));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterIoCommands(CLI::App& app, absl::Status* result) {
  // Static, so the parsed options outlive parsing without heap objects the leak checker flags.
  static struct {
    std::string url, src, dst;
    bool recursive = false;
    uint64_t offset = 0;
    int64_t length = -1;
  } args;

  auto* ls = app.add_subcommand(
      "ls", "List objects under a URL (s3://bucket/prefix, path, ...); `ls s3://` lists buckets");
  ls->add_option("URL", args.url, "s3:// (the buckets), bucket, prefix, folder or object")
      ->required();
  ls->add_flag("-r,--recursive", args.recursive, "list every object below, not just one level");
  ls->callback([result] { *result = Ls(args.url, args.recursive); });

  auto* cat =
      app.add_subcommand("cat", "Write an object (or a byte range of it) to standard output");
  cat->add_option("URL", args.url, "object URL")->required();
  cat->add_option("--offset", args.offset, "first byte to write");
  cat->add_option("--length", args.length, "number of bytes (default: to the end)");
  cat->callback([result] { *result = Cat(args.url, args.offset, args.length); });

  static CopyOptions copy;
  auto* cp =
      app.add_subcommand("cp",
                         "Copy one object between URLs (a DST ending in '/' keeps the name); with "
                         "--recursive, every object below a prefix or folder");
  cp->add_option("SRC", args.src, "source URL")->required();
  cp->add_option("DST", args.dst, "destination URL")->required();
  cp->add_flag("-r,--recursive", args.recursive,
               "copy every object below SRC (a prefix or folder) to the same names below DST");
  cp->add_option("-j,--jobs", copy.jobs, "objects copied at once with --recursive (default 8)")
      ->check(CLI::PositiveNumber);
  AddProgressFlags(cp, &copy.progress);
  cp->callback([result] {
    *result = args.recursive ? CopyTree(args.src, args.dst, /*sync=*/false, copy)
                             : Cp(args.src, args.dst, copy);
  });

  auto* sync = app.add_subcommand(
      "sync",
      "Make DST (a prefix or folder) hold every object of SRC: copies the objects that are "
      "missing, differ in size or ETag, or are newer in SRC; deletes nothing");
  sync->add_option("SRC", args.src, "source prefix or folder (s3://bucket/prefix/, path)")
      ->required();
  sync->add_option("DST", args.dst, "destination prefix or folder")->required();
  sync->add_option("-j,--jobs", copy.jobs, "objects copied at once (default 8)")
      ->check(CLI::PositiveNumber);
  AddProgressFlags(sync, &copy.progress);
  sync->callback([result] { *result = CopyTree(args.src, args.dst, /*sync=*/true, copy); });
}

}  // namespace stoker::cli
