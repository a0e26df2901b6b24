// TLS and bearer tokens on the service's gRPC (docs/security.md).
//
// SecurityOptions names PEM and token files; Security::Load reads them once. Then:
//   - servers (dispatcher, worker) listen with ServerCredentials() and call Check() first in
//     every RPC handler (the role says which token the RPC needs);
//   - every process that dials (worker -> dispatcher, client -> dispatcher and workers) makes its
//     channels with MakeChannel(): TLS when a CA is given, and an interceptor that puts the token
//     in every call's `authorization` metadata ("Bearer TOKEN").
//
// Tokens: `token_file` holds the client token. Servers require it on the RPCs clients make (the
// dispatcher's GetOrCreateJob and ClientHeartbeat, the worker's GetElements); clients present it.
// `worker_token_file` holds the worker token: the dispatcher requires it on the RPCs workers make
// (WorkerHeartbeat, GetSplit) and workers present it to the dispatcher. It defaults to the client
// token, so one shared token works; separate ones keep a trainer from registering as a worker.
// A server without a token accepts every call (with or without one).
//
// Neither a token nor key material appears in any log line, error or page: errors name the files
// and flags, never their contents.
//
// Thread safety: a loaded Security is immutable and may be shared by any number of threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace stoker::service {

struct SecurityOptions {
  // Serving: TLS with this certificate chain and private key (both or neither). With mutual
  // TLS, a dialling process presents them as its client certificate too.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Serving: require clients to present a certificate signed by this CA (mutual TLS).
  std::string tls_client_ca_file;
  // Dialling: use TLS and verify servers' certificates against this CA (empty: plaintext).
  std::string tls_ca_file;
  std::string token_file;         // the client token (--token-file, STOKER_TOKEN_FILE)
  std::string worker_token_file;  // the worker token (default: the client token)

  bool empty() const {
    return tls_cert_file.empty() && tls_key_file.empty() && tls_client_ca_file.empty() &&
           tls_ca_file.empty() && token_file.empty() && worker_token_file.empty();
  }
};

// Which token an RPC needs.
enum class Caller { kClient, kWorker };

class Security {
 public:
  // Reads every named file; an error names the file and flag (never its contents) if one cannot
  // be read, a token file is empty, or only one of the certificate and key is given.
  static absl::StatusOr<std::shared_ptr<const Security>> Load(const SecurityOptions& options);
  // No TLS, no token (what a process without security flags uses).
  static std::shared_ptr<const Security> None();

  bool tls_server() const { return !cert_.empty(); }
  bool tls_client() const { return !ca_.empty(); }
  bool requires_token() const { return !client_token_.empty() || !worker_token_.empty(); }

  // Credentials to serve with: TLS (mutual if a client CA is given) or plaintext.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;

  // A channel to `address` (HOST:PORT) presenting `as`'s token on every call, without gRPC's own
  // reconnect back-off growing past a second (a restarted peer is found again quickly).
  std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, Caller as) const;

  // OK if the call carries the token `caller` RPCs need (or none is needed); otherwise
  // UNAUTHENTICATED with a message saying what the caller must configure, and a (rate-limited)
  // warning in this process's log naming the RPC and the peer. `server` names this server in
  // both ("dispatcher", "worker"). Tokens are compared in constant time.
  grpc::Status Check(const grpc::ServerContext& ctx, Caller caller, std::string_view server,
                     std::string_view rpc) const;

 private:
  Security() = default;
  std::string cert_, key_, client_ca_, ca_;
  std::string client_token_, worker_token_;
};

// Why an RPC to `address` failed with UNAVAILABLE when the cause is a configuration mismatch
// this side can name: a plaintext channel to a TLS server, a TLS channel to a plaintext server,
// or a TLS handshake the server refused (wrong CA, missing client certificate). Probes the
// address with a short TCP connection, and with a second one 0.3 s later to confirm a mismatch
// (at most ~2.5 s in all). Empty when no mismatch is found (e.g. nothing listens there: the
// caller's own message says so). *certain (if given) is set to false
// for a failed handshake, which could also be a connection cut short: retry before reporting it.
std::string DiagnoseUnavailable(const std::string& address, const Security& security,
                                const grpc::Status& status, bool* certain = nullptr);

// Compares in time that depends only on the lengths, not on where the strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Logs once per process that `server` serves plaintext gRPC on a non-loopback address (`bind`,
// checked by ParseBindAddress); nothing for a loopback one, which only this host reaches.
void WarnIfPlaintext(const Security& security, std::string_view server, const std::string& bind,
                     int port);

}  // namespace stoker::service
