// ScriptServer: the lifecycle shared by the test servers that a scripts/*-test-server script
// starts and stops (S3TestServer: Swift; HttpTestServer: nginx). A server lives in a fresh
// temporary state folder; `SCRIPT start DIR ...` starts it (with STOKER_TEST_OWNER_PID, so the
// script stops it if the test process dies without running the destructor), `SCRIPT stop DIR`
// stops it, and the folder is removed with it.
//
// Thread safety: the accessors are immutable after Start; Stop is called by one thread (or the
// destructor).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::testing {

class ScriptServer {
 public:
  // Stops the server (Stop()) and removes its state folder.
  virtual ~ScriptServer();
  ScriptServer(const ScriptServer&) = delete;
  ScriptServer& operator=(const ScriptServer&) = delete;

  const std::string& host() const { return host_; }  // "127.0.0.1"
  int port() const { return port_; }
  // The folder holding the server's configuration, logs and pid files.
  const std::string& state_dir() const { return state_dir_; }

  // Stops the server now (idempotent; the destructor calls it) and removes the state folder.
  absl::Status Stop();

 protected:
  // `script` is the file name under scripts/ (e.g. "s3-test-server"); `what` names the server in
  // errors (e.g. "the S3 test server (Swift)").
  ScriptServer(std::string script, std::string what);

  // Creates the state folder (a temporary folder named after `temp_prefix`).
  absl::Status MakeStateDir(std::string_view temp_prefix);
  // Runs `SCRIPT start STATE_DIR extra_args...`; Unavailable naming the server if it fails.
  absl::Status StartScript(const std::vector<std::string>& extra_args = {});
  // Runs `SCRIPT command STATE_DIR` and returns its output (e.g. "env", "url").
  absl::StatusOr<std::string> RunScript(std::string_view command) const;
  // Sets host() and port() from "http://HOST:PORT", with or without a trailing '/'.
  absl::Status SetAddress(std::string_view url);

  std::string state_dir_;

 private:
  std::string script_path_;
  std::string what_;
  std::string host_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace stoker::testing
