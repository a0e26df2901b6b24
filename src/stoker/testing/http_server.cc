#include "stoker/testing/http_server.h"

#include <filesystem>
#include <fstream>

#include "stoker/core/strings.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {

absl::StatusOr<std::unique_ptr<HttpTestServer>> HttpTestServer::Start(std::string_view root) {
  std::unique_ptr<HttpTestServer> server(new HttpTestServer());
  if (absl::Status s = server->MakeStateDir("stoker-http"); !s.ok()) return s;
  if (root.empty()) {
    // Inside the state folder, so that removing it removes both.
    server->root_dir_ = StrCat(server->state_dir(), "/root");
    std::error_code error;
    std::filesystem::create_directory(server->root_dir_, error);
    if (error) {
      return absl::InternalError(
          StrCat("cannot create ", server->root_dir_, ": ", error.message()));
    }
  } else {
    server->root_dir_ = std::string(root);
  }
  if (absl::Status s = server->StartScript({server->root_dir_}); !s.ok()) return s;
  absl::StatusOr<std::string> url = server->RunScript("url");
  if (!url.ok()) return url.status();
  // "http://127.0.0.1:PORT/\n"
  std::string_view text = *url;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  server->url_ = std::string(text);
  if (absl::Status s = server->SetAddress(text); !s.ok()) return s;
  return server;
}

absl::StatusOr<HttpTestServer*> HttpTestServer::Shared() {
  return SharedInstance<HttpTestServer>([] { return Start(); });
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
