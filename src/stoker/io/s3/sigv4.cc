#include "stoker/io/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>

#include "stoker/core/strings.h"
#include "stoker/io/s3/s3_request.h"

namespace stoker::io::s3 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trims and collapses runs of spaces/tabs into one space (SigV4 canonical header values).
std::string CanonicalHeaderValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

// Lower-cased, sorted (stable: repeated names keep their order) headers.
std::vector<HttpHeader> SortedLowerHeaders(const std::vector<HttpHeader>& headers) {
  std::vector<HttpHeader> sorted;
  sorted.reserve(headers.size());
  for (const auto& h : headers) sorted.push_back({Lower(h.name), CanonicalHeaderValue(h.value)});
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const HttpHeader& a, const HttpHeader& b) { return a.name < b.name; });
  return sorted;
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xf]);
  }
  return out;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest), length));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string AmzDate(absl::Time time) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", time, absl::UTCTimeZone());
}

std::string DateStamp(absl::Time time) {
  return absl::FormatTime("%Y%m%d", time, absl::UTCTimeZone());
}

std::string CredentialScope(absl::Time time, std::string_view region, std::string_view service) {
  return StrCat(DateStamp(time), "/", region, "/", service, "/aws4_request");
}

std::string SignedHeaders(const std::vector<HttpHeader>& headers) {
  std::string out;
  std::string previous;
  for (const auto& h : SortedLowerHeaders(headers)) {
    if (!out.empty() && h.name == previous) continue;
    if (!out.empty()) out.push_back(';');
    out += h.name;
    previous = h.name;
  }
  return out;
}

std::string CanonicalRequest(const CanonicalInput& input) {
  std::string out =
      StrCat(input.method, "\n", input.canonical_uri.empty() ? "/" : input.canonical_uri, "\n",
             CanonicalQueryString(input.query), "\n");
  std::vector<HttpHeader> sorted = SortedLowerHeaders(input.headers);
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && sorted[i].name == sorted[i - 1].name) {
      out.pop_back();  // the '\n' of the previous line: join repeated names with ','
      out += StrCat(",", sorted[i].value, "\n");
    } else {
      out += StrCat(sorted[i].name, ":", sorted[i].value, "\n");
    }
  }
  out += StrCat("\n", SignedHeaders(input.headers), "\n", input.payload_hash);
  return out;
}

std::string StringToSign(absl::Time time, std::string_view credential_scope,
                         std::string_view canonical_request) {
  return StrCat(kAlgorithm, "\n", AmzDate(time), "\n", credential_scope, "\n",
                Sha256Hex(canonical_request));
}

std::string SigningKey(std::string_view secret_access_key, absl::Time time, std::string_view region,
                       std::string_view service) {
  std::string key = HmacSha256(StrCat("AWS4", secret_access_key), DateStamp(time));
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  return HmacSha256(key, "aws4_request");
}

std::string Signature(std::string_view signing_key, std::string_view string_to_sign) {
  return HexEncode(HmacSha256(signing_key, string_to_sign));
}

SignedRequest SignRequest(const SignInput& input) {
  SignedRequest result;
  const std::string amz_date = AmzDate(input.time);
  result.headers_to_add.push_back({"X-Amz-Date", amz_date});
  result.headers_to_add.push_back({"X-Amz-Content-Sha256", input.payload_hash});
  if (!input.credentials.session_token.empty()) {
    result.headers_to_add.push_back({"X-Amz-Security-Token", input.credentials.session_token});
  }

  CanonicalInput canonical{input.method, input.canonical_uri, input.query, {}, input.payload_hash};
  canonical.headers.push_back({"Host", input.host});
  canonical.headers.insert(canonical.headers.end(), input.headers.begin(), input.headers.end());
  canonical.headers.insert(canonical.headers.end(), result.headers_to_add.begin(),
                           result.headers_to_add.end());

  const std::string scope = CredentialScope(input.time, input.region, input.service);
  result.canonical_request = CanonicalRequest(canonical);
  result.string_to_sign = StringToSign(input.time, scope, result.canonical_request);
  result.signature = Signature(
      SigningKey(input.credentials.secret_access_key, input.time, input.region, input.service),
      result.string_to_sign);
  result.headers_to_add.push_back(
      {"Authorization", StrCat(kAlgorithm, " Credential=", input.credentials.access_key_id, "/",
                               scope, ", SignedHeaders=", SignedHeaders(canonical.headers),
                               ", Signature=", result.signature)});
  return result;
}

}  // namespace stoker::io::s3
