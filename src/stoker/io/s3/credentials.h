// S3 client settings and credentials from the standard AWS environment (docs/s3.md).
//
// Lookup order (the first that yields something wins):
//   endpoint     AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL; otherwise
//   https://s3.<region>.amazonaws.com region       AWS_REGION, then AWS_DEFAULT_REGION; otherwise
//   us-east-1 credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   otherwise the
//                profile AWS_PROFILE (default "default") of the shared credentials file
//                AWS_SHARED_CREDENTIALS_FILE (default $HOME/.aws/credentials); otherwise anonymous
//                (empty) credentials, and requests are sent unsigned (public buckets only).
//
// Secrets never leave this struct in text form: DebugString() and every error message name the
// access key id at most.
//
// Thread safety: plain values and free functions; S3ConfigFromEnvironment is thread-safe when the
// injected getenv is (the default reads the process environment, which nothing in stoker changes).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace stoker::io::s3 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials

  // Anonymous credentials mean "send requests unsigned".
  bool anonymous() const { return access_key_id.empty(); }
  // "Credentials{access_key_id=AKIA..., secret=<set>, session_token=<set>}"; never the secrets.
  std::string DebugString() const;
};

struct S3Config {
  // scheme://host[:port] with no trailing slash, e.g. "https://s3.us-east-1.amazonaws.com" or
  // "http://127.0.0.1:8080". May carry a base path ("http://host/s3"), which prefixes every
  // request.
  std::string endpoint;
  std::string region = "us-east-1";
  // true: http://endpoint/bucket/key (custom endpoints: Swift, MinIO, ...).
  // false: virtual-hosted http://bucket.host/key (AWS); BuildRequest still falls back to
  // path-style for bucket names that are not valid DNS labels (dots, upper case, underscores).
  bool path_style = true;
  Credentials credentials;
};

// Returns the value of an environment variable, or nullopt when unset.
using GetEnvFunction = std::function<std::optional<std::string>(std::string_view name)>;

// The process environment (std::getenv).
std::optional<std::string> SystemGetEnv(std::string_view name);

// Builds the configuration from the environment (see the lookup order above). Errors
// (InvalidArgument) for: a malformed AWS_ENDPOINT_URL, only one of the key id / secret set, an
// explicitly named credentials file (AWS_SHARED_CREDENTIALS_FILE) or profile (AWS_PROFILE) that
// does not exist, a credentials file that does not parse. The default ~/.aws/credentials may be
// absent.
absl::StatusOr<S3Config> S3ConfigFromEnvironment(const GetEnvFunction& getenv = SystemGetEnv);

// An INI file: section name -> (key -> value). Keys are lower-cased; values are trimmed.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;

// Parses INI text ("[section]", "key = value", comments starting with '#' or ';', blank lines).
// `filename` only names the file in errors, which give the line number and what to fix.
absl::StatusOr<IniSections> ParseIni(std::string_view text, std::string_view filename);

// The credentials of `profile` in a parsed AWS credentials file. Both "[name]" and
// "[profile name]" section headers are accepted. NotFound when the profile is absent;
// InvalidArgument when it lacks aws_access_key_id or aws_secret_access_key.
absl::StatusOr<Credentials> CredentialsFromProfile(const IniSections& file,
                                                   std::string_view profile,
                                                   std::string_view filename);

}  // namespace stoker::io::s3
