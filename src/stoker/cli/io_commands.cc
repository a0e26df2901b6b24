// stoker ls / cat / cp: the object-store layer from the shell.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stoker/cli/commands.h"
#include "stoker/core/fd_io.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/io/read/ranged_reader.h"
#include "stoker/io/url.h"

namespace stoker::cli {
namespace {

absl::Status WriteAll(int fd, const Buffer& data) {
  if (int error = stoker::WriteAll(fd, data.view()); error != 0) {
    return absl::UnavailableError(StrCat("cannot write to standard output: ", strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status Ls(const std::string& url, bool recursive) {
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

// Streams `range` of an object to `sink` in order, fetching up to `window` parts of
// reader.options().part_size concurrently. All parts are pinned to the ETag seen by Stat, so a
// concurrent overwrite fails the copy instead of mixing versions.
absl::Status StreamObject(io::RangedReader& reader, std::string_view key, io::ByteRange range,
                          const std::function<absl::Status(Buffer)>& sink, int window = 16) {
  ASSIGN_OR_RETURN(io::ObjectInfo info, reader.store().Stat(key));
  if (range.offset > info.size) {
    return absl::OutOfRangeError(StrCat("offset ", range.offset, " is past the end of ",
                                        reader.store().Url(key), " (", info.size, " bytes)"));
  }
  uint64_t end = std::min<uint64_t>(range.end(), info.size);
  const uint64_t part = reader.options().part_size;
  size_t parts = static_cast<size_t>((end - range.offset + part - 1) / part);

  absl::Mutex mu;
  std::vector<std::optional<absl::StatusOr<Buffer>>> results(parts);
  size_t issued = 0;
  for (size_t written = 0; written < parts; ++written) {
    for (; issued < parts && issued < written + static_cast<size_t>(window); ++issued) {
      uint64_t offset = range.offset + issued * part;
      reader.ReadRangesAsync(std::string(key), {{offset, std::min(part, end - offset)}}, info.etag,
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

absl::Status Cat(const std::string& url, uint64_t offset, int64_t length) {
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(url));
  io::RangedReader reader(source.store);
  io::ByteRange range{offset, length < 0 ? io::ByteRange::kToEnd : static_cast<uint64_t>(length)};
  return StreamObject(reader, source.key, range,
                      [](Buffer part) { return WriteAll(STDOUT_FILENO, part); });
}

absl::Status Cp(const std::string& from, const std::string& to) {
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(from));
  std::string destination_url = to;
  if (to.ends_with("/")) {
    size_t slash = source.key.rfind('/');
    destination_url += source.key.substr(slash == std::string::npos ? 0 : slash + 1);
  }
  ASSIGN_OR_RETURN(io::StoreAndKey destination, io::OpenUrl(destination_url));
  ASSIGN_OR_RETURN(auto writer, destination.store->OpenWriter(destination.key));
  io::RangedReader reader(source.store);
  RETURN_IF_ERROR(StreamObject(reader, source.key, {},
                               [&writer](Buffer part) { return writer->Append(std::move(part)); }));
  return writer->Close();
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

  auto* ls = app.add_subcommand("ls", "List objects under a URL (s3://bucket/prefix, path, ...)");
  ls->add_option("URL", args.url, "bucket, prefix, folder or object")->required();
  ls->add_flag("-r,--recursive", args.recursive, "list every object below, not just one level");
  ls->callback([result] { *result = Ls(args.url, args.recursive); });

  auto* cat =
      app.add_subcommand("cat", "Write an object (or a byte range of it) to standard output");
  cat->add_option("URL", args.url, "object URL")->required();
  cat->add_option("--offset", args.offset, "first byte to write");
  cat->add_option("--length", args.length, "number of bytes (default: to the end)");
  cat->callback([result] { *result = Cat(args.url, args.offset, args.length); });

  auto* cp =
      app.add_subcommand("cp", "Copy one object between URLs (a DST ending in '/' keeps the name)");
  cp->add_option("SRC", args.src, "source URL")->required();
  cp->add_option("DST", args.dst, "destination URL")->required();
  cp->callback([result] { *result = Cp(args.src, args.dst); });
}

}  // namespace stoker::cli
