// stoker mount: a read-only POSIX view of a bucket, prefix, HTTP listing or local folder.
#include <cctype>
#include <string>

#include "stoker/cli/commands.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/fuse/mount.h"

namespace stoker::cli {
namespace {

// Parses "1073741824", "512M", "512MiB", "2G", "64k" into bytes; `flag` names the option.
absl::StatusOr<uint64_t> ParseSize(const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) {
    return absl::InvalidArgumentError(StrCat(flag, ": '", text, "' is not a size in bytes"));
  }
  uint64_t value = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (unit.empty() || unit == "b") {
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else {
    return absl::InvalidArgumentError(
        StrCat(flag, ": unknown unit in '", text, "' (use K, M or G)"));
  }
  if (value == 0) return absl::InvalidArgumentError(StrCat(flag, " must be positive"));
  return value << shift;
}

absl::Status Mount(fuse::MountOptions options, const std::string& cache_size,
                   const std::string& disk_cache_size) {
  ASSIGN_OR_RETURN(options.cache_bytes, ParseSize("--cache-size", cache_size));
  ASSIGN_OR_RETURN(options.disk_cache_bytes, ParseSize("--disk-cache-size", disk_cache_size));
  return fuse::RunMount(options);
}

}  // namespace

void RegisterMountCommands(CLI::App& app, absl::Status* result) {
  // Static storage: the options outlive parsing without a heap object.
  static struct {
    fuse::MountOptions options;
    std::string cache_size = "1G";
    std::string disk_cache_size = "10G";
  } args;
  auto* mount = app.add_subcommand(
      "mount",
      "Mount a bucket, prefix, HTTP listing or folder read-only (unmount: fusermount3 -u)");
  mount->add_option("URL", args.options.url, "s3://bucket[/prefix], http(s)://host/path/, folder")
      ->required();
  mount->add_option("MOUNTPOINT", args.options.mountpoint, "an existing empty folder")->required();
  mount->add_option("--cache-size", args.cache_size,
                    "RAM cache and read-ahead budget of all open files together (default 1G)");
  mount->add_option("--disk-cache", args.options.disk_cache_dir,
                    "folder for a disk tier of the cache (kept across mounts)");
  mount->add_option("--disk-cache-size", args.disk_cache_size, "disk tier budget (default 10G)");
  mount->add_flag("-f,--foreground", args.options.foreground,
                  "serve in this process until unmounted or interrupted (default: return once "
                  "the mount is ready and serve from a background process)");
  mount->callback(
      [result] { *result = Mount(args.options, args.cache_size, args.disk_cache_size); });
}

}  // namespace stoker::cli
