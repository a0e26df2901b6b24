// The `stoker` command (README.md, "The command line"; docs/architecture.md). Exit status: 0
// on success, 2 for a usage error (the message and the command's usage line go to stderr), 1 for
// any other failure ("stoker: <message>").
#include <cstdio>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "stoker/cli/commands.h"
#include "stoker/core/logging.h"
#include "stoker/core/version.h"

namespace {

// Every command reads these (any URL may be s3://); each --help ends with them.
constexpr char kEnvironmentHelp[] = R"(
Environment:
  AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3)  S3 endpoint, e.g. http://127.0.0.1:9000 (path-style)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN  credentials
  AWS_REGION (or AWS_DEFAULT_REGION)  region (default us-east-1)
  AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE  profile and files (~/.aws/...)
  AWS_CA_BUNDLE                      CA certificates for https endpoints
  STOKER_MAX_REQUESTS                HTTP requests in flight per process (default 16)
  STOKER_CACHE_BYTES                 size of the in-memory block cache
  STOKER_CACHE_DIR, STOKER_CACHE_DISK_BYTES  on-disk cache folder and size
  STOKER_LOG                         trace|debug|info|warn|error|off (default warn; info for
                                     the dispatcher and workers)
Exit status: 0 success, 1 failure, 2 usage error.)";

// The deepest subcommand the command line selected (the root app when none).
const CLI::App* SelectedCommand(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    if (sub->parsed()) return SelectedCommand(*sub);
  }
  return &app;
}

std::string CommandPath(const CLI::App* app) {
  // Names from the innermost command outwards, joined the other way round.
  std::vector<std::string> names;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent())
    if (!a->get_name().empty()) names.push_back(a->get_name());
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!path.empty()) path += ' ';
    path += *it;
  }
  return path;
}

// Appends the environment help to every command's footer (after a command's own, e.g. the
// service commands' log level).
void AddEnvironmentHelp(CLI::App& app) {
  const std::string own = app.get_footer();
  app.footer(own.empty() ? std::string(kEnvironmentHelp) : own + "\n\n" + kEnvironmentHelp);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    AddEnvironmentHelp(*sub);
  }
}

}  // namespace

int main(int argc, char** argv) {
  stoker::InitLogging();
  // Debian's abseil is built with mutex deadlock detection on: it tracks every lock order, about
  // 1% of a service worker's CPU (profiled). Tests (the ASan build) keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"stoker: keeps accelerators fed with training data"};
  app.name("stoker");
  app.set_version_flag(
      "--version",
      std::string("stoker ") + stoker::Version() + " (commit " + stoker::GitCommit() + ")",
      "print the version and the git commit of this build");
  app.require_subcommand(1);
  absl::Status result;
  stoker::cli::RegisterIoCommands(app, &result);
  stoker::cli::RegisterFormatCommands(app, &result);
  stoker::cli::RegisterRunCommands(app, &result);
  stoker::cli::RegisterServiceCommands(app, &result);
  stoker::cli::RegisterMountCommands(app, &result);
  stoker::cli::RegisterBenchReadCommand(app, &result);
  AddEnvironmentHelp(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const CLI::App* command = SelectedCommand(app);
    std::fprintf(stderr, "stoker: %s\n%sRun `%s --help` for more information.\n", e.what(),
                 CLI::Formatter().make_usage(command, CommandPath(command)).c_str(),
                 CommandPath(command).c_str());
    return 2;
  }
  if (!result.ok()) {
    std::fprintf(stderr, "stoker: %s\n", std::string(result.message()).c_str());
    return 1;
  }
  return 0;
}
