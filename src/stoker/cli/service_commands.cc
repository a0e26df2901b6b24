// stoker dispatcher / worker / consume / demo: the disaggregated service from the shell
// (docs/protocol.md). This file registers the command families in turn (dispatcher and worker in
// server_commands.cc, consume in consume_command.cc, demo in demo_command.cc) and holds what they
// share (service_cli.h): stop-signal handling, the --log-format flag and the TLS and token flags.
#include <signal.h>

#include <string>

#include "stoker/cli/commands.h"
#include "stoker/cli/service_cli.h"
#include "stoker/core/strings.h"

namespace stoker::cli {

namespace {
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void BlockStopSignals() {
  sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}
void WaitForSignal() {
  sigset_t set = StopSignals();
  int sig = 0;
  sigwait(&set, &sig);
}
bool StopSignalPending() {
  sigset_t pending;
  if (sigpending(&pending) != 0) return false;
  return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
}

void AddLogOptions(CLI::App* app, std::string* format, const char* default_level) {
  app->add_option("--log-format", *format,
                  "text (default) or json: one JSON object a line (time, level, thread, msg) for "
                  "log pipelines")
      ->check(CLI::IsMember({"text", "json"}));
  app->footer(
      StrCat("Logs go to stderr. STOKER_LOG=trace|debug|info|warn|error|off sets the level "
             "(default here: ",
             default_level, "). See docs/operations.md."));
}

void AddSecurityOptions(CLI::App* app, service::SecurityOptions* o, int sides, bool worker) {
  const bool serves = (sides & kServes) != 0, dials = (sides & kDials) != 0;
  app->add_option("--tls-cert", o->tls_cert_file,
                  serves ? "PEM certificate chain to serve TLS with (with --tls-key)"
                         : "PEM client certificate, for servers that require one (mutual TLS)");
  app->add_option("--tls-key", o->tls_key_file, "PEM private key of --tls-cert");
  if (serves)
    app->add_option("--tls-client-ca", o->tls_client_ca_file,
                    "mutual TLS: accept only clients presenting a certificate signed by this PEM "
                    "CA");
  if (dials)
    app->add_option("--tls-ca", o->tls_ca_file,
                    "dial with TLS, verifying servers' certificates against this PEM CA "
                    "(default: $STOKER_TLS_CA; none: plaintext)")
        ->envname("STOKER_TLS_CA");
  app->add_option("--token-file", o->token_file,
                  serves ? "file holding the client token: required on every client RPC"
                           " (default: $STOKER_TOKEN_FILE; none: no token required)"
                         : "file holding the token presented on every RPC (default: "
                           "$STOKER_TOKEN_FILE)")
      ->envname("STOKER_TOKEN_FILE");
  if (serves && !worker)
    app->add_option("--worker-token-file", o->worker_token_file,
                    "file holding the token workers must present (default: $STOKER_WORKER_TOKEN_"
                    "FILE, else --token-file's)")
        ->envname("STOKER_WORKER_TOKEN_FILE");
  if (worker)
    app->add_option("--worker-token-file", o->worker_token_file,
                    "file holding the token presented to the dispatcher (default: "
                    "$STOKER_WORKER_TOKEN_FILE, else --token-file's)")
        ->envname("STOKER_WORKER_TOKEN_FILE");
  app->footer(StrCat(app->get_footer(), "\nSecurity: STOKER_TOKEN_FILE",
                     serves ? ", STOKER_WORKER_TOKEN_FILE" : "", dials ? ", STOKER_TLS_CA" : "",
                     " stand for the flags of the same name. Tokens and keys are never logged. "
                     "See docs/security.md."));
}

void RegisterServiceCommands(CLI::App& app, absl::Status* result) {
  RegisterServerCommands(app, result);
  RegisterConsumeCommand(app, result);
  RegisterDemoCommand(app, result);
  RegisterSnapshotCommand(app, result);
}

}  // namespace stoker::cli
