#include "stoker/testing/http_server.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "stoker/core/strings.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {
namespace {

std::string ScriptPath() { return StrCat(SourceDir(), "/scripts/http-test-server"); }

absl::Status CheckScriptExists() {
  if (std::filesystem::exists(ScriptPath())) return absl::OkStatus();
  return absl::FailedPreconditionError(
      StrCat(ScriptPath(), " does not exist; set STOKER_SOURCE_DIR to stoker's source folder"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpTestServer>> HttpTestServer::Start(std::string_view root) {
  if (absl::Status s = CheckScriptExists(); !s.ok()) return s;
  std::unique_ptr<HttpTestServer> server(new HttpTestServer());
  absl::StatusOr<std::string> state_dir = MakeTempDir("stoker-http");
  if (!state_dir.ok()) return state_dir.status();
  server->state_dir_ = *state_dir;
  if (root.empty()) {
    // Inside the state folder, so one remove_all cleans both.
    server->root_dir_ = StrCat(*state_dir, "/root");
    server->owns_root_ = true;
    std::error_code error;
    std::filesystem::create_directory(server->root_dir_, error);
    if (error) {
      return absl::InternalError(
          StrCat("cannot create ", server->root_dir_, ": ", error.message()));
    }
  } else {
    server->root_dir_ = std::string(root);
  }
  absl::StatusOr<std::string> started =
      RunCommandOk({"bash", ScriptPath(), "start", server->state_dir_, server->root_dir_},
                   {{"STOKER_TEST_OWNER_PID", std::to_string(getpid())}});
  if (!started.ok()) {
    return absl::UnavailableError(
        StrCat("the HTTP test server (nginx) did not start: ", started.status().message()));
  }
  absl::StatusOr<std::string> url = RunCommandOk({"bash", ScriptPath(), "url", server->state_dir_});
  if (!url.ok()) return url.status();
  // "http://127.0.0.1:PORT/\n"
  std::string_view text = *url;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  server->url_ = std::string(text);
  std::string_view host_port = text;
  if (host_port.starts_with("http://")) host_port.remove_prefix(7);
  if (host_port.ends_with("/")) host_port.remove_suffix(1);
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos ||
      !absl::SimpleAtoi(ToAbsl(host_port.substr(colon + 1)), &server->port_)) {
    return absl::InternalError(StrCat("unexpected URL from http-test-server: '", text, "'"));
  }
  server->host_ = std::string(host_port.substr(0, colon));
  return server;
}

absl::StatusOr<HttpTestServer*> HttpTestServer::Shared() {
  return SharedInstance<HttpTestServer>([] { return Start(); });
}

HttpTestServer::~HttpTestServer() { Stop().IgnoreError(); }

absl::Status HttpTestServer::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  absl::StatusOr<std::string> stopped = RunCommandOk({"bash", ScriptPath(), "stop", state_dir_});
  std::error_code ignored;
  std::filesystem::remove_all(state_dir_, ignored);  // holds root_dir_ when we created it
  return stopped.status();
}

absl::Status HttpTestServer::WriteFile(std::string_view relative_path,
                                       std::string_view contents) const {
  std::filesystem::path path = std::filesystem::path(root_dir_) / std::string(relative_path);
  std::error_code error;
  std::filesystem::create_directories(path.parent_path(), error);
  if (error) {
    return absl::InternalError(
        StrCat("cannot create ", path.parent_path().string(), ": ", error.message()));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::InternalError(StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

}  // namespace stoker::testing
