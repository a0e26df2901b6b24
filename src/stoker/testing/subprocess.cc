#include "stoker/testing/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "stoker/core/strings.h"

extern char** environ;

namespace stoker::testing {
namespace {

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    line += arg;
  }
  return line;
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const EnvOverrides& env) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");

  // Everything the child needs is built before spawning.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  std::vector<std::string> env_strings;
  std::set<std::string> overridden;
  for (const auto& [name, value] : env) {
    if (value.has_value()) env_strings.push_back(StrCat(name, "=", *value));
    overridden.insert(name);
  }
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string name(entry.substr(0, entry.find('=')));
    if (!overridden.contains(name)) env_strings.emplace_back(entry);
  }
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(StrCat("pipe2 failed: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  pid_t pid = 0;
  int spawn_error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawn_error != 0) {
    close(pipe_fds[0]);
    return absl::FailedPreconditionError(
        StrCat("cannot run '", CommandLine(argv), "': ", std::strerror(spawn_error)));
  }

  CommandResult result;
  char chunk[4096];
  while (true) {
    ssize_t n = read(pipe_fds[0], chunk, sizeof(chunk));
    if (n > 0) {
      result.output.append(chunk, n);
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(pipe_fds[0]);

  int wait_status = 0;
  while (waitpid(pid, &wait_status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          StrCat("waitpid for '", CommandLine(argv), "' failed: ", std::strerror(errno)));
    }
  }
  result.exit_code =
      WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  return result;
}

absl::StatusOr<std::string> RunCommandOk(const std::vector<std::string>& argv,
                                         const EnvOverrides& env) {
  absl::StatusOr<CommandResult> result = RunCommand(argv, env);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    constexpr size_t kTail = 4000;
    std::string_view tail = result->output;
    if (tail.size() > kTail) tail = tail.substr(tail.size() - kTail);
    return absl::InternalError(StrCat("'", CommandLine(argv), "' exited with status ",
                                      result->exit_code, "; its output ends with:\n", tail));
  }
  return std::move(result->output);
}

absl::StatusOr<std::string> MakeTempDir(std::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      StrCat((tmp != nullptr && *tmp != '\0') ? tmp : "/tmp", "/", prefix, "-XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(StrCat("cannot create a temporary folder ", path, ": ",
                                      std::strerror(errno), "; check TMPDIR"));
  }
  return path;
}

ScopedTempDir::ScopedTempDir(std::string_view prefix) {
  absl::StatusOr<std::string> path = MakeTempDir(prefix);
  if (!path.ok()) {
    std::fprintf(stderr, "%s\n", std::string(path.status().message()).c_str());
    std::abort();
  }
  path_ = *std::move(path);
}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string SourceDir() {
  const char* dir = std::getenv("STOKER_SOURCE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return STOKER_DEFAULT_SOURCE_DIR;
}

}  // namespace stoker::testing
