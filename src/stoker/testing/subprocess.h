// Running a command to completion from tests (the test-server scripts, the AWS CLI, curl).
#pragma once

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

// The project's source folder: $STOKER_SOURCE_DIR (set by stoker_test), else the folder this
// library was configured from.
std::string SourceDir();

}  // namespace stoker::testing
