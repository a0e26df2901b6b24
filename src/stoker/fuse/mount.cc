#define FUSE_USE_VERSION 314
#include "stoker/fuse/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "stoker/core/fd_io.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/fuse/mount_fs.h"
#include "stoker/io/cache/block_cache.h"
#include "stoker/io/url.h"

namespace stoker::fuse {
namespace {

struct Context {
  std::unique_ptr<MountFs> fs;
  absl::Duration dir_ttl;
  uid_t uid;
  gid_t gid;
};

// Kernel read-ahead of the mount, in bytes: the kernel then sends reads of up to 1 MiB (its
// largest FUSE request) instead of 128 KiB, eight times fewer requests through the FUSE loop.
constexpr uint64_t kKernelReadAhead = 1 << 20;

Context* Ctx() { return static_cast<Context*>(fuse_get_context()->private_data); }

void FillStat(const Attr& attr, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  const Context* ctx = Ctx();
  st->st_uid = ctx->uid;
  st->st_gid = ctx->gid;
  if (attr.is_dir) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(attr.size);
    st->st_blocks = static_cast<blkcnt_t>((attr.size + 511) / 512);
    st->st_blksize = 1 << 20;
  }
  timespec t = absl::ToTimespec(attr.mtime);
  st->st_mtim = st->st_ctim = st->st_atim = t;
}

void* Init(fuse_conn_info* conn, fuse_config* cfg) {
  Context* ctx = Ctx();
  double ttl = absl::ToDoubleSeconds(ctx->dir_ttl);
  cfg->entry_timeout = ttl;
  cfg->attr_timeout = ttl;
  cfg->negative_timeout = 1.0;
  cfg->kernel_cache = 0;  // keep_cache is decided per open, from the ETag
  cfg->use_ino = 0;
  cfg->nullpath_ok = 0;  // readdir needs the path (no opendir state)
  // The kernel takes the smaller of this and its per-mount setting (128 KiB by default), which
  // SetKernelReadAhead raises.
  conn->max_readahead = kKernelReadAhead;
  return ctx;
}

// The file a FUSE open handed back: FUSE keeps each open file's handle as a uint64_t (`fh`),
// which OpenOp set to the MountFs::File it owns until ReleaseOp.
MountFs::File* OpenFile(const fuse_file_info* fi) {
  return reinterpret_cast<MountFs::File*>(fi->fh);  // NOLINT(performance-no-int-to-ptr)
}

int GetAttrOp(const char* path, struct stat* st, fuse_file_info* fi) {
  MountFs& fs = *Ctx()->fs;
  if (fi != nullptr && fi->fh != 0) {
    FillStat(OpenFile(fi)->attr(), st);
    return 0;
  }
  auto attr = fs.GetAttr(path);
  if (!attr.ok()) return -fs.ErrnoFor(attr.status(), path);
  FillStat(*attr, st);
  return 0;
}

int ReadDirOp(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*,
              fuse_readdir_flags flags) {
  MountFs& fs = *Ctx()->fs;
  auto entries = fs.ReadDir(path);
  if (!entries.ok()) return -fs.ErrnoFor(entries.status(), path);
  const bool plus = (flags & FUSE_READDIR_PLUS) != 0;
  struct stat st;
  Attr dir;
  dir.is_dir = true;
  FillStat(dir, &st);
  fill(buf, ".", &st, 0, fuse_fill_dir_flags{});
  fill(buf, "..", &st, 0, fuse_fill_dir_flags{});
  for (const auto& [name, attr] : *entries) {
    FillStat(attr, &st);
    if (fill(buf, name.c_str(), &st, 0, plus ? FUSE_FILL_DIR_PLUS : fuse_fill_dir_flags{}) != 0) {
      break;
    }
  }
  return 0;
}

int OpenOp(const char* path, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  MountFs& fs = *Ctx()->fs;
  bool keep_cache = false;
  auto file = fs.Open(path, &keep_cache);
  if (!file.ok()) return -fs.ErrnoFor(file.status(), path);
  fi->keep_cache = keep_cache ? 1 : 0;
  fi->fh = reinterpret_cast<uint64_t>(file->release());
  return 0;
}

int ReadOp(const char* path, char* out, size_t size, off_t offset, fuse_file_info* fi) {
  MountFs& fs = *Ctx()->fs;
  auto* file = OpenFile(fi);
  auto n = fs.Read(*file, out, size, static_cast<uint64_t>(offset));
  if (!n.ok()) return -fs.ErrnoFor(n.status(), path != nullptr ? path : "(open file)");
  return static_cast<int>(*n);
}

int ReleaseOp(const char*, fuse_file_info* fi) {
  delete OpenFile(fi);
  fi->fh = 0;
  return 0;
}

int StatFsOp(const char*, struct statvfs* st) {
  std::memset(st, 0, sizeof(*st));
  st->f_bsize = st->f_frsize = 1 << 20;
  st->f_namemax = 1024;
  st->f_flag = ST_RDONLY;
  return 0;
}

// Every modifying operation: the mount is read-only (the kernel refuses most before they get
// here, because the mount is "ro").
int RefuseMode(const char*, mode_t) { return -EROFS; }
int RefusePath(const char*) { return -EROFS; }
int RefuseRename(const char*, const char*, unsigned int) { return -EROFS; }
int RefuseCreate(const char*, mode_t, fuse_file_info*) { return -EROFS; }
int RefuseTruncate(const char*, off_t, fuse_file_info*) { return -EROFS; }
int RefuseWrite(const char*, const char*, size_t, off_t, fuse_file_info*) { return -EROFS; }

fuse_operations Operations() {
  fuse_operations ops{};
  ops.init = Init;
  ops.getattr = GetAttrOp;
  ops.readdir = ReadDirOp;
  ops.open = OpenOp;
  ops.read = ReadOp;
  ops.release = ReleaseOp;
  ops.statfs = StatFsOp;
  ops.mkdir = RefuseMode;
  ops.unlink = RefusePath;
  ops.rmdir = RefusePath;
  ops.rename = RefuseRename;
  ops.create = RefuseCreate;
  ops.truncate = RefuseTruncate;
  ops.write = RefuseWrite;
  return ops;
}

// How /proc/self/mountinfo writes a path: space, tab, newline and backslash as octal escapes.
std::string MountinfoEscape(std::string_view path) {
  std::string out;
  for (char c : path) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\\') {
      char octal[5];
      std::snprintf(octal, sizeof(octal), "\\%03o", static_cast<unsigned char>(c));
      out += octal;
    } else {
      out += c;
    }
  }
  return out;
}

// Raises the kernel's read-ahead for the new mount (its backing device's read_ahead_kb in sysfs,
// found through the device number in /proc/self/mountinfo; a stat of the mount point would need
// the FUSE loop, which does not run yet). Needs root; otherwise the kernel's 128 KiB stays and
// everything still works, with smaller reads.
void SetKernelReadAhead(const std::string& mountpoint) {
  char resolved[PATH_MAX];
  if (::realpath(mountpoint.c_str(), resolved) == nullptr) return;
  const std::string wanted = MountinfoEscape(resolved);
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line, device;
  while (std::getline(mountinfo, line)) {
    // "id parent major:minor root mount-point options ... - fstype source super-options"
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (point == wanted && line.find(" - fuse.stoker ") != std::string::npos) device = dev;
  }
  if (device.empty()) return;
  const std::string path = StrCat("/sys/class/bdi/", device, "/read_ahead_kb");
  std::ofstream out(path);
  out << (kKernelReadAhead >> 10) << "\n";
  out.flush();
  if (!out) {
    spdlog::info("stoker mount: cannot set {} (not root?); the kernel reads 128 KiB at a time",
                 path);
  }
}

struct Mounted {
  std::unique_ptr<Context> ctx;
  ::fuse* f = nullptr;
};

// Opens the store and cache, checks the root listing and mounts. Starts no FUSE thread yet.
absl::StatusOr<Mounted> Mount(const MountOptions& o) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(o.url));
  io::BlockCacheOptions cache_options;
  cache_options.memory_bytes = o.cache_bytes;
  cache_options.disk_dir = o.disk_cache_dir;
  cache_options.disk_bytes = o.disk_cache_bytes;
  ASSIGN_OR_RETURN(std::shared_ptr<io::BlockCache> cache, io::BlockCache::Create(cache_options));
  auto ctx = std::make_unique<Context>();
  MountFsOptions fs_options;
  fs_options.dir_ttl = o.dir_ttl;
  ctx->fs = std::make_unique<MountFs>(target.store, target.key, cache, fs_options);
  ctx->dir_ttl = o.dir_ttl;
  ctx->uid = getuid();
  ctx->gid = getgid();
  RETURN_IF_ERROR(ctx->fs->CheckRoot());

  std::string mount_opts = "ro,fsname=stoker,subtype=stoker";
  const char* argv[] = {"stoker", "-o", mount_opts.c_str()};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
  fuse_operations ops = Operations();
  ::fuse* f = fuse_new(&args, &ops, sizeof(ops), ctx.get());
  if (f == nullptr) return absl::InternalError("fuse_new failed (bad mount options)");
  if (fuse_mount(f, o.mountpoint.c_str()) != 0) {
    fuse_destroy(f);
    return absl::FailedPreconditionError(
        StrCat("cannot mount on ", o.mountpoint,
               ": it must be an existing folder, not already a mount; /dev/fuse and fusermount3 "
               "must be usable (see the message above)"));
  }
  SetKernelReadAhead(o.mountpoint);
  return Mounted{std::move(ctx), f};
}

absl::Status Serve(Mounted& m, const MountOptions& o) {
  fuse_session* se = fuse_get_session(m.f);
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_unmount(m.f);
    fuse_destroy(m.f);
    return absl::InternalError("cannot install SIGINT/SIGTERM handlers");
  }
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, static_cast<unsigned>(o.max_threads));
  fuse_loop_cfg_set_idle_threads(config, static_cast<unsigned>(o.max_threads / 2));
  int rc = fuse_loop_mt(m.f, config);
  fuse_loop_cfg_destroy(config);
  fuse_remove_signal_handlers(se);
  fuse_unmount(m.f);
  fuse_destroy(m.f);
  m.ctx.reset();
  // A signal ends the loop with its number; that is an orderly unmount.
  if (rc != 0 && rc != SIGINT && rc != SIGTERM && rc != SIGHUP) {
    return absl::InternalError(StrCat("the FUSE loop of ", o.mountpoint, " failed: ", rc));
  }
  return absl::OkStatus();
}

// The mount point must be an existing, empty folder: mounting over a file fails later in a
// background process, and mounting over a non-empty folder hides its files.
absl::Status CheckMountPoint(const std::string& mountpoint) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOTCONN) {
      return absl::FailedPreconditionError(StrCat("mount point ", mountpoint,
                                                  " is a FUSE mount whose process died; unmount it "
                                                  "first with `fusermount3 -u ",
                                                  mountpoint, "`"));
    }
    return absl::InvalidArgumentError(StrCat("mount point ", mountpoint, ": ", strerror(err),
                                             " (it must be an existing empty folder)"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(StrCat(
        "mount point ", mountpoint, " is not a folder (it must be an existing empty folder)"));
  }
  DIR* dir = ::opendir(mountpoint.c_str());
  if (dir == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("mount point ", mountpoint, ": cannot list it: ", strerror(errno)));
  }
  std::string first;
  while (dirent* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") {
      first = std::string(name);
      break;
    }
  }
  ::closedir(dir);
  if (!first.empty()) {
    return absl::InvalidArgumentError(
        StrCat("mount point ", mountpoint, " is not empty (it holds '", first,
               "', ...); mounting over it would hide its files: use an empty folder"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunMount(const MountOptions& options) {
  RETURN_IF_ERROR(CheckMountPoint(options.mountpoint));
  if (options.foreground) {
    ASSIGN_OR_RETURN(Mounted m, Mount(options));
    return Serve(m, options);
  }
  // Fork before anything starts a thread; the child mounts and reports "ok" or the error through
  // the pipe, so the parent returns only once the mount is usable (or fails with the reason).
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return absl::InternalError(StrCat("pipe: ", strerror(errno)));
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(StrCat("fork: ", strerror(errno)));
  if (pid > 0) {
    ::close(pipe_fds[1]);
    std::string report;
    ReadToEnd(pipe_fds[0], &report);  // a read error leaves the report short: reported below
    ::close(pipe_fds[0]);
    if (report == "ok") return absl::OkStatus();
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    if (report.empty()) report = "the mount process exited before the mount was ready";
    return absl::UnavailableError(StrCat("cannot mount ", options.url, ": ", report));
  }
  ::close(pipe_fds[0]);
  auto mounted = Mount(options);
  if (!mounted.ok()) {
    WriteAll(pipe_fds[1], std::string(mounted.status().message()));
    ::_exit(1);
  }
  ::setsid();
  if (::chdir("/") != 0) { /* nothing depends on the working folder */
  }
  int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    if (null_fd > 2) ::close(null_fd);
  }
  WriteAll(pipe_fds[1], "ok");
  ::close(pipe_fds[1]);
  absl::Status served = Serve(*mounted, options);
  ::_exit(served.ok() ? 0 : 1);
}

}  // namespace stoker::fuse
