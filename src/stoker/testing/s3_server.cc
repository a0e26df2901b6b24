#include "stoker/testing/s3_server.h"

#include <cstdlib>

#include "stoker/core/strings.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {
namespace {

constexpr char kAwsCli[] = "/usr/bin/aws";  // Debian's; a pyenv shim may shadow `aws` on PATH

}  // namespace

absl::StatusOr<std::unique_ptr<S3TestServer>> S3TestServer::Start() {
  std::unique_ptr<S3TestServer> server(new S3TestServer());
  if (absl::Status s = server->MakeStateDir("stoker-s3"); !s.ok()) return s;
  if (absl::Status s = server->StartScript(); !s.ok()) return s;
  absl::StatusOr<std::string> env = server->RunScript("env");
  if (!env.ok()) return env.status();
  // Lines look like "export AWS_ENDPOINT_URL=http://127.0.0.1:PORT".
  std::string_view rest = *env;
  while (!rest.empty()) {
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (!line.starts_with("export ")) continue;
    line.remove_prefix(7);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = line.substr(0, eq);
    std::string value(line.substr(eq + 1));
    if (name == "AWS_ENDPOINT_URL") server->endpoint_ = value;
    if (name == "AWS_ACCESS_KEY_ID") server->access_key_id_ = value;
    if (name == "AWS_SECRET_ACCESS_KEY") server->secret_access_key_ = value;
    if (name == "AWS_REGION") server->region_ = value;
  }
  if (server->endpoint_.empty() || server->access_key_id_.empty()) {
    return absl::InternalError(
        StrCat("'s3-test-server env ", server->state_dir(), "' printed no endpoint: ", *env));
  }
  if (absl::Status s = server->SetAddress(server->endpoint_); !s.ok()) return s;
  return server;
}

absl::StatusOr<S3TestServer*> S3TestServer::Shared() {
  return SharedInstance<S3TestServer>([] { return Start(); });
}

absl::StatusOr<std::string> S3TestServer::RunAwsCli(const std::vector<std::string>& args,
                                                    std::string_view endpoint_override) const {
  std::vector<std::string> argv = {
      kAwsCli, "--endpoint-url",
      endpoint_override.empty() ? endpoint_ : std::string(endpoint_override)};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommandOk(argv, {{"AWS_ACCESS_KEY_ID", access_key_id_},
                             {"AWS_SECRET_ACCESS_KEY", secret_access_key_},
                             {"AWS_REGION", region_},
                             {"AWS_DEFAULT_REGION", region_},
                             {"AWS_SESSION_TOKEN", std::nullopt},
                             {"AWS_PROFILE", std::nullopt},
                             {"AWS_CONFIG_FILE", "/dev/null"},
                             {"AWS_SHARED_CREDENTIALS_FILE", "/dev/null"},
                             {"AWS_CA_BUNDLE", ""},
                             {"AWS_PAGER", ""}});
}

absl::Status S3TestServer::CreateBucket(std::string_view bucket) const {
  absl::StatusOr<std::string> out =
      RunAwsCli({"s3api", "create-bucket", "--bucket", std::string(bucket)});
  if (!out.ok()) {
    return absl::Status(out.status().code(), StrCat("creating bucket '", bucket, "' at ", endpoint_,
                                                    " failed: ", out.status().message()));
  }
  return absl::OkStatus();
}

void S3TestServer::ExportEnvironment() const {
  setenv("AWS_ENDPOINT_URL", endpoint_.c_str(), 1);
  setenv("AWS_ACCESS_KEY_ID", access_key_id_.c_str(), 1);
  setenv("AWS_SECRET_ACCESS_KEY", secret_access_key_.c_str(), 1);
  setenv("AWS_REGION", region_.c_str(), 1);
  unsetenv("AWS_SESSION_TOKEN");
  unsetenv("AWS_PROFILE");
}

void S3ServerTest::SetUp() {
  absl::StatusOr<S3TestServer*> server = S3TestServer::Shared();
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *server;
  server_->ExportEnvironment();
}

}  // namespace stoker::testing
