// stoker mount: a read-only POSIX view of a bucket, prefix, HTTP listing or local folder.
#include <string>

#include "stoker/cli/commands.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/fuse/mount.h"

namespace stoker::cli {
namespace {

absl::Status Mount(fuse::MountOptions options, const std::string& cache_size,
                   const std::string& disk_cache_size) {
  ASSIGN_OR_RETURN(options.cache_bytes, ParseByteSizeFlag("--cache-size", cache_size));
  ASSIGN_OR_RETURN(options.disk_cache_bytes,
                   ParseByteSizeFlag("--disk-cache-size", disk_cache_size));
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
