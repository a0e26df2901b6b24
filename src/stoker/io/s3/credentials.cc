#include "stoker/io/s3/credentials.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::io::s3 {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Unset and empty variables are treated alike, as the AWS tools do.
std::optional<std::string> Env(const GetEnvFunction& getenv, std::string_view name) {
  std::optional<std::string> value = getenv(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

// Validates and normalises an endpoint URL: scheme://host[:port][/base], no trailing slash.
absl::StatusOr<std::string> NormalizeEndpoint(std::string_view raw, std::string_view variable) {
  std::string_view url = Trim(raw);
  while (url.ends_with('/')) url.remove_suffix(1);
  size_t scheme_end = url.find("://");
  std::string scheme = scheme_end == std::string_view::npos ? "" : Lower(url.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") {
    return absl::InvalidArgumentError(
        StrCat(variable, "='", url,
               "' is not an http:// or https:// URL; set it like http://127.0.0.1:8080"));
  }
  std::string_view rest = url.substr(scheme_end + 3);
  if (rest.empty() || rest.front() == '/' || rest.front() == ':') {
    return absl::InvalidArgumentError(
        StrCat(variable, "='", url, "' has no host; set it like http://127.0.0.1:8080"));
  }
  if (rest.find_first_of("?#@ ") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        StrCat(variable, "='", url,
               "' must be scheme://host[:port][/path] without user, query or fragment"));
  }
  return StrCat(scheme, "://", rest);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(StrCat("cannot open AWS credentials file ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(StrCat("cannot read AWS credentials file ", path));
  return text.str();
}

}  // namespace

std::string Credentials::DebugString() const {
  if (anonymous()) return "Credentials{anonymous}";
  return StrCat("Credentials{access_key_id=", access_key_id,
                ", secret_access_key=", secret_access_key.empty() ? "<empty>" : "<set>",
                session_token.empty() ? "" : ", session_token=<set>", "}");
}

std::optional<std::string> SystemGetEnv(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<IniSections> ParseIni(std::string_view text, std::string_view filename) {
  IniSections sections;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte order mark
  std::string section;
  bool in_section = false;
  std::string last_key;  // for indented sub-keys ("s3 =" followed by "  addressing_style = path")
  int line_number = 0;
  // Errors name the file and line but never quote the line: it may hold a secret.
  auto error = [&](std::string_view what) {
    return absl::InvalidArgumentError(StrCat(filename, ":", line_number, ": ", what));
  };
  while (!text.empty()) {
    ++line_number;
    size_t eol = text.find('\n');
    std::string_view raw = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    bool indented = !raw.empty() && (raw.front() == ' ' || raw.front() == '\t');
    std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return error("a section header must look like [name]; add the closing ']'");
      }
      std::string_view name = Trim(line.substr(1, line.size() - 2));
      if (name.empty()) return error("empty section name []; write [default] or [profile-name]");
      section = std::string(name);
      in_section = true;
      sections[section];  // an empty section still exists
      last_key.clear();
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return error("expected 'key = value', a [section] header or a # comment");
    }
    std::string key = Lower(Trim(line.substr(0, eq)));
    std::string_view value = Trim(line.substr(eq + 1));
    if (key.empty()) return error("a line starts with '='; write 'key = value'");
    if (!in_section) {
      return error("a 'key = value' line comes before any section; add [default] above it");
    }
    if (indented && !last_key.empty() && sections[section][last_key].empty()) {
      // A nested setting of the previous key (AWS config style); kept as "parent.key".
      sections[section][StrCat(last_key, ".", key)] = std::string(value);
      continue;
    }
    sections[section][key] = std::string(value);
    last_key = key;
  }
  return sections;
}

absl::StatusOr<Credentials> CredentialsFromProfile(const IniSections& file,
                                                   std::string_view profile,
                                                   std::string_view filename) {
  auto it = file.find(std::string(profile));
  if (it == file.end()) it = file.find(StrCat("profile ", profile));
  if (it == file.end()) {
    return absl::NotFoundError(StrCat("profile [", profile, "] not found in ", filename));
  }
  const auto& values = it->second;
  auto get = [&](const char* key) -> std::string {
    auto v = values.find(key);
    return v == values.end() ? "" : v->second;
  };
  Credentials credentials;
  credentials.access_key_id = get("aws_access_key_id");
  credentials.secret_access_key = get("aws_secret_access_key");
  credentials.session_token = get("aws_session_token");
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        StrCat("profile [", profile, "] in ", filename,
               " needs both aws_access_key_id and aws_secret_access_key"));
  }
  return credentials;
}

absl::StatusOr<S3Config> S3ConfigFromEnvironment(const GetEnvFunction& getenv) {
  S3Config config;
  if (auto region = Env(getenv, "AWS_REGION")) {
    config.region = *region;
  } else if (auto default_region = Env(getenv, "AWS_DEFAULT_REGION")) {
    config.region = *default_region;
  }

  std::optional<std::string> endpoint;
  std::string_view endpoint_variable = "AWS_ENDPOINT_URL_S3";
  endpoint = Env(getenv, endpoint_variable);
  if (!endpoint) {
    endpoint_variable = "AWS_ENDPOINT_URL";
    endpoint = Env(getenv, endpoint_variable);
  }
  if (endpoint) {
    ASSIGN_OR_RETURN(config.endpoint, NormalizeEndpoint(*endpoint, endpoint_variable));
    config.path_style = true;
  } else {
    config.endpoint = StrCat("https://s3.", config.region, ".amazonaws.com");
    config.path_style = false;
  }

  auto key_id = Env(getenv, "AWS_ACCESS_KEY_ID");
  auto secret = Env(getenv, "AWS_SECRET_ACCESS_KEY");
  if (key_id && secret) {
    config.credentials.access_key_id = *key_id;
    config.credentials.secret_access_key = *secret;
    config.credentials.session_token = Env(getenv, "AWS_SESSION_TOKEN").value_or("");
    return config;
  }
  if (key_id || secret) {
    return absl::InvalidArgumentError(
        StrCat(key_id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY", " is set but ",
               key_id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
               " is not; set both, or neither to use ~/.aws/credentials"));
  }

  auto explicit_file = Env(getenv, "AWS_SHARED_CREDENTIALS_FILE");
  auto explicit_profile = Env(getenv, "AWS_PROFILE");
  std::string profile = explicit_profile.value_or("default");
  std::string path;
  if (explicit_file) {
    path = *explicit_file;
  } else if (auto home = Env(getenv, "HOME")) {
    path = StrCat(*home, "/.aws/credentials");
  }
  const bool must_find = explicit_file.has_value() || explicit_profile.has_value();
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) {
    if (!must_find) return config;  // anonymous
    return absl::InvalidArgumentError(StrCat(
        "AWS credentials file ", path.empty() ? "~/.aws/credentials" : path,
        " does not exist, but ", explicit_file ? "AWS_SHARED_CREDENTIALS_FILE" : "AWS_PROFILE",
        " asks for it; create it or unset the variable"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(IniSections sections, ParseIni(text, path));
  absl::StatusOr<Credentials> credentials = CredentialsFromProfile(sections, profile, path);
  if (credentials.ok()) {
    config.credentials = *std::move(credentials);
    return config;
  }
  if (absl::IsNotFound(credentials.status()) && !must_find) return config;  // anonymous
  return absl::InvalidArgumentError(StrCat(
      credentials.status().message(),
      absl::IsNotFound(credentials.status()) ? "; add the section or change AWS_PROFILE" : ""));
}

}  // namespace stoker::io::s3
