#include "stoker/io/s3/s3_request.h"

#include <algorithm>
#include <cctype>

#include "stoker/core/strings.h"

namespace stoker::io::s3 {
namespace {

bool IsUnreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct Endpoint {
  std::string scheme;     // "http" or "https"
  std::string host_port;  // "127.0.0.1:8080", lower-cased
  std::string base_path;  // "" or "/base" (no trailing slash)
};

absl::StatusOr<Endpoint> ParseEndpoint(std::string_view url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return absl::InvalidArgumentError(
        StrCat("S3 endpoint '", url, "' is not scheme://host[:port]; e.g. http://127.0.0.1:8080"));
  }
  Endpoint endpoint;
  endpoint.scheme = std::string(url.substr(0, scheme_end));
  std::string_view rest = url.substr(scheme_end + 3);
  size_t slash = rest.find('/');
  std::string_view host = rest.substr(0, slash);
  if (host.empty()) {
    return absl::InvalidArgumentError(StrCat("S3 endpoint '", url, "' has no host"));
  }
  endpoint.host_port.reserve(host.size());
  for (char c : host) endpoint.host_port.push_back(static_cast<char>(std::tolower(c)));
  if (slash != std::string_view::npos) {
    std::string_view base = rest.substr(slash);
    while (base.ends_with('/')) base.remove_suffix(1);
    endpoint.base_path = std::string(base);
  }
  return endpoint;
}

}  // namespace

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  for (unsigned char c : s) {
    if (IsUnreserved(c) || (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    }
  }
  return out;
}

absl::StatusOr<std::string> UriDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          StrCat("bad percent-escape at offset ", i, " of '", s, "'"));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::string CanonicalQueryString(const QueryParams& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(UriEncode(name, true), UriEncode(value, true));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out.push_back('&');
    out += StrCat(name, "=", value);
  }
  return out;
}

bool IsVirtualHostableBucket(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (unsigned char c : bucket) {
    if (!(std::islower(c) || std::isdigit(c) || c == '-')) return false;
  }
  return bucket.front() != '-' && bucket.back() != '-';
}

absl::StatusOr<S3Request> BuildRequest(const S3Config& config, std::string_view method,
                                       std::string_view bucket, std::string_view key,
                                       const QueryParams& query,
                                       const std::vector<HttpHeader>& extra_headers,
                                       std::string_view payload_hash, absl::Time now) {
  absl::StatusOr<Endpoint> endpoint = ParseEndpoint(config.endpoint);
  if (!endpoint.ok()) return endpoint.status();

  std::string host = endpoint->host_port;
  std::string path = endpoint->base_path;
  const bool virtual_hosted =
      !config.path_style && !bucket.empty() && IsVirtualHostableBucket(bucket);
  if (virtual_hosted) {
    host = StrCat(bucket, ".", host);
  } else if (!bucket.empty()) {
    path += StrCat("/", UriEncode(bucket, true));
  }
  if (!key.empty()) {
    path += StrCat("/", UriEncode(key, false));
  } else if (path.empty()) {
    path.push_back('/');  // (not path = "/": GCC 12 reports a bogus -Wrestrict)
  }

  S3Request request;
  request.method = std::string(method);
  request.url = StrCat(endpoint->scheme, "://", host, path);
  const std::string query_string = CanonicalQueryString(query);
  if (!query_string.empty()) request.url += StrCat("?", query_string);

  request.headers.push_back({"Host", host});
  request.headers.insert(request.headers.end(), extra_headers.begin(), extra_headers.end());
  if (config.credentials.anonymous()) return request;

  SignInput sign;
  sign.method = std::string(method);
  sign.host = host;
  sign.canonical_uri = path;
  sign.query = query;
  sign.headers = extra_headers;
  sign.payload_hash = std::string(payload_hash);
  sign.region = config.region;
  sign.credentials = config.credentials;
  sign.time = now;
  SignedRequest signed_request = SignRequest(sign);
  request.headers.insert(request.headers.end(), signed_request.headers_to_add.begin(),
                         signed_request.headers_to_add.end());
  return request;
}

}  // namespace stoker::io::s3
