// A plain HTTP server for tests: Debian's nginx serving a folder, started through
// scripts/http-test-server on a free 127.0.0.1 port (Range requests, keep-alive, sendfile, JSON
// listings of folders). See docs/testing.md.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stoker/testing/script_server.h"

namespace stoker::testing {

// Thread safety: the accessors are immutable after Start and thread-safe; WriteFile is
// thread-safe for distinct paths.
class HttpTestServer : public ScriptServer {
 public:
  // Starts nginx serving `root` (an existing folder); when `root` is empty, serves a fresh
  // temporary folder (root_dir()) that is removed with the server.
  static absl::StatusOr<std::unique_ptr<HttpTestServer>> Start(std::string_view root = "");

  // The process-wide server over its own temporary folder, started on the first call and stopped
  // at exit. Every later call returns the same server or the same start-up error.
  static absl::StatusOr<HttpTestServer*> Shared();

  // The destructor and Stop() (ScriptServer) stop nginx and remove the state folder, with
  // root_dir() when the server created it.

  // "http://127.0.0.1:PORT/" (with the trailing slash); a file ROOT/a/b is at url() + "a/b".
  const std::string& url() const { return url_; }
  // The folder being served.
  const std::string& root_dir() const { return root_dir_; }

  // Writes `contents` to root_dir()/relative_path, creating folders as needed.
  absl::Status WriteFile(std::string_view relative_path, std::string_view contents) const;

 private:
  HttpTestServer() : ScriptServer("http-test-server", "the HTTP test server (nginx)") {}

  std::string root_dir_;
  std::string url_;
};

}  // namespace stoker::testing
