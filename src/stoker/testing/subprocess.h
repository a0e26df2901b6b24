// Running a command to completion from tests (the test-server scripts, the AWS CLI, curl).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::testing {

// (name, value) pairs applied over the current environment; a nullopt value removes the name.
using EnvOverrides = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct CommandResult {
  int exit_code = 0;   // the exit status; 128 + N when killed by signal N
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv (argv[0] is looked up on PATH) with stdin from /dev/null and the current environment
// with `env` applied, and waits for it. Fails only when the command cannot be
// started; a non-zero exit is reported in the result. Thread-safe (uses posix_spawn).
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const EnvOverrides& env = {});

// As RunCommand, but a non-zero exit is an Internal error naming the command and its output's tail.
absl::StatusOr<std::string> RunCommandOk(const std::vector<std::string>& argv,
                                         const EnvOverrides& env = {});

// Creates a fresh folder named PREFIX-XXXXXX under $TMPDIR (default /tmp) and returns its path.
absl::StatusOr<std::string> MakeTempDir(std::string_view prefix);

// A folder from MakeTempDir, removed with everything in it when this object goes away. Aborts the
// test process if the folder cannot be created (a test cannot run without it). Not thread-safe.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(std::string_view prefix = "stoker-test");
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The process-wide instance of a test server: `start()` (returning StatusOr<unique_ptr<Server>>)
// runs on the first call; every call returns that server, or the same start-up error. The server
// is destroyed (stopped) at exit. Thread-safe.
template <typename Server, typename StartFn>
absl::StatusOr<Server*> SharedInstance(StartFn start) {
  static std::once_flag once;
  static absl::Status* error = nullptr;  // leaked on purpose: read after static destruction
  static std::unique_ptr<Server> owner;
  std::call_once(once, [&] {
    absl::StatusOr<std::unique_ptr<Server>> started = start();
    if (started.ok()) {
      owner = *std::move(started);
    } else {
      error = new absl::Status(started.status());
    }
  });
  if (error != nullptr) return *error;
  return owner.get();
}

// The project's source folder: $STOKER_SOURCE_DIR (set by stoker_test), else the folder this
// library was configured from.
std::string SourceDir();

}  // namespace stoker::testing
