// stoker ls / cat / cp: the object-store layer from the shell.
#include <unistd.h>

#include <cstdio>

#include "stoker/core/strings.h"

#include "absl/time/time.h"
#include "stoker/cli/commands.h"
#include "stoker/core/status.h"
#include "stoker/io/url.h"

namespace stoker::cli {
namespace {

absl::Status WriteAll(int fd, const Buffer& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(StrCat("cannot write to standard output: ", strerror(errno)));
    }
    done += static_cast<size_t>(n);
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
  ASSIGN_OR_RETURN(io::ListResult listing,
                   target.store->List({prefix, recursive ? "" : "/", 0}));
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

absl::Status Cat(const std::string& url, uint64_t offset, int64_t length) {
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(url));
  io::ByteRange range{offset, length < 0 ? io::ByteRange::kToEnd : static_cast<uint64_t>(length)};
  ASSIGN_OR_RETURN(Buffer data, source.store->Read(source.key, range));
  return WriteAll(STDOUT_FILENO, data);
}

absl::Status Cp(const std::string& from, const std::string& to) {
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(from));
  std::string destination_url = to;
  if (to.ends_with("/")) {
    size_t slash = source.key.rfind('/');
    destination_url += source.key.substr(slash == std::string::npos ? 0 : slash + 1);
  }
  ASSIGN_OR_RETURN(io::StoreAndKey destination, io::OpenUrl(destination_url));
  ASSIGN_OR_RETURN(Buffer data, source.store->Read(source.key));
  return destination.store->Put(destination.key, std::move(data));
}

}  // namespace

void RegisterIoCommands(CLI::App& app, absl::Status* result) {
  auto* ls = app.add_subcommand("ls", "List objects under a URL (s3://bucket/prefix, path, ...)");
  auto* ls_url = new std::string;
  auto* ls_recursive = new bool(false);
  ls->add_option("URL", *ls_url, "bucket, prefix, folder or object")->required();
  ls->add_flag("-r,--recursive", *ls_recursive, "list every object below, not just one level");
  ls->callback([=] { *result = Ls(*ls_url, *ls_recursive); });

  auto* cat = app.add_subcommand("cat", "Write an object (or a byte range of it) to standard output");
  auto* cat_url = new std::string;
  auto* cat_offset = new uint64_t(0);
  auto* cat_length = new int64_t(-1);
  cat->add_option("URL", *cat_url, "object URL")->required();
  cat->add_option("--offset", *cat_offset, "first byte to write");
  cat->add_option("--length", *cat_length, "number of bytes (default: to the end)");
  cat->callback([=] { *result = Cat(*cat_url, *cat_offset, *cat_length); });

  auto* cp = app.add_subcommand("cp", "Copy one object between URLs (a DST ending in '/' keeps the name)");
  auto* cp_src = new std::string;
  auto* cp_dst = new std::string;
  cp->add_option("SRC", *cp_src, "source URL")->required();
  cp->add_option("DST", *cp_dst, "destination URL")->required();
  cp->callback([=] { *result = Cp(*cp_src, *cp_dst); });
}

}  // namespace stoker::cli
