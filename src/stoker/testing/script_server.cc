#include "stoker/testing/script_server.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "stoker/core/strings.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {

ScriptServer::ScriptServer(std::string script, std::string what)
    : script_path_(StrCat(SourceDir(), "/scripts/", script)), what_(std::move(what)) {}

ScriptServer::~ScriptServer() { Stop().IgnoreError(); }

absl::Status ScriptServer::MakeStateDir(std::string_view temp_prefix) {
  if (!std::filesystem::exists(script_path_)) {
    return absl::FailedPreconditionError(
        StrCat(script_path_, " does not exist; set STOKER_SOURCE_DIR to stoker's source folder"));
  }
  absl::StatusOr<std::string> dir = MakeTempDir(temp_prefix);
  if (!dir.ok()) return dir.status();
  state_dir_ = *dir;
  return absl::OkStatus();
}

absl::Status ScriptServer::StartScript(const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {"bash", script_path_, "start", state_dir_};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  absl::StatusOr<std::string> started =
      RunCommandOk(argv, {{"STOKER_TEST_OWNER_PID", std::to_string(getpid())}});
  if (!started.ok()) {
    return absl::UnavailableError(StrCat(what_, " did not start: ", started.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ScriptServer::RunScript(std::string_view command) const {
  return RunCommandOk({"bash", script_path_, std::string(command), state_dir_});
}

absl::Status ScriptServer::SetAddress(std::string_view url) {
  std::string_view rest = url;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  if (rest.ends_with("/")) rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  if (!url.starts_with("http://") || colon == std::string_view::npos ||
      !absl::SimpleAtoi(ToAbsl(rest.substr(colon + 1)), &port_)) {
    return absl::InternalError(StrCat("unexpected address '", url, "' from ", script_path_));
  }
  host_ = std::string(rest.substr(0, colon));
  return absl::OkStatus();
}

absl::Status ScriptServer::Stop() {
  if (stopped_ || state_dir_.empty()) return absl::OkStatus();
  stopped_ = true;
  absl::StatusOr<std::string> stopped = RunScript("stop");
  std::error_code ignored;
  std::filesystem::remove_all(state_dir_, ignored);
  return stopped.status();
}

}  // namespace stoker::testing
