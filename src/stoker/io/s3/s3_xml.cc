#include "stoker/io/s3/s3_xml.h"

#include <tinyxml2.h>

#include <cctype>
#include <charconv>
#include <cstring>

#include "stoker/core/markup.h"
#include "stoker/core/strings.h"
#include "stoker/io/s3/s3_request.h"

namespace stoker::io::s3 {
namespace {

using tinyxml2::XMLDocument;
using tinyxml2::XMLElement;

// Error messages quote at most this much of a server's text.
constexpr size_t kMaxQuoted = 300;

std::string_view Clip(std::string_view s) { return s.substr(0, kMaxQuoted); }

// Element name without a namespace prefix ("s3:Key" -> "Key").
std::string_view LocalName(const XMLElement* e) {
  std::string_view name = e->Name() ? e->Name() : "";
  size_t colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

const XMLElement* Child(const XMLElement* parent, std::string_view name) {
  for (const XMLElement* e = parent->FirstChildElement(); e; e = e->NextSiblingElement()) {
    if (LocalName(e) == name) return e;
  }
  return nullptr;
}

std::string Text(const XMLElement* e) {
  const char* text = e ? e->GetText() : nullptr;
  return text ? text : "";
}

std::string ChildText(const XMLElement* parent, std::string_view name) {
  return Text(Child(parent, name));
}

absl::StatusOr<const XMLElement*> ParseRoot(XMLDocument& doc, std::string_view xml,
                                            std::string_view what, std::string_view root_name) {
  if (doc.Parse(xml.data(), xml.size()) != tinyxml2::XML_SUCCESS) {
    return absl::InvalidArgumentError(StrCat(what, " response is not valid XML (", doc.ErrorName(),
                                             " at line ", doc.ErrorLineNum(), ")"));
  }
  const XMLElement* root = doc.RootElement();
  if (root == nullptr || LocalName(root) != root_name) {
    return absl::InvalidArgumentError(StrCat(what, " response has root <",
                                             root ? Clip(LocalName(root)) : "", ">, expected <",
                                             root_name, ">"));
  }
  return root;
}

absl::StatusOr<int64_t> ParseInt(std::string_view text, std::string_view where) {
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 0) {
    return absl::InvalidArgumentError(
        StrCat(where, " is not a non-negative integer: '", Clip(text), "'"));
  }
  return value;
}

absl::StatusOr<bool> ParseBool(std::string_view text, std::string_view where) {
  if (text == "true") return true;
  if (text == "false") return false;
  return absl::InvalidArgumentError(StrCat(where, " is not true/false: '", Clip(text), "'"));
}

// Keys in a response with EncodingType=url: S3 percent-encodes them and writes spaces as '+'.
absl::StatusOr<std::string> DecodeListedName(std::string text, bool url_encoded,
                                             std::string_view where) {
  if (!url_encoded) return text;
  for (char& c : text) {
    if (c == '+') c = ' ';
  }
  absl::StatusOr<std::string> decoded = UriDecode(text);
  if (!decoded.ok()) {
    return absl::InvalidArgumentError(
        StrCat(where, " is not URL-encoded as EncodingType=url says"));
  }
  return decoded;
}

}  // namespace

std::string StripETagQuotes(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

absl::StatusOr<absl::Time> ParseIso8601(std::string_view value) {
  absl::Time time;
  std::string error;
  // absl::ParseTime also accepts "infinite-past"/"infinite-future"; a timestamp starts with a
  // digit.
  if (value.empty() || !std::isdigit(static_cast<unsigned char>(value.front()))) {
    return absl::InvalidArgumentError(
        StrCat("bad ISO 8601 time '", Clip(value), "' (want e.g. 2009-10-12T17:50:30.000Z)"));
  }
  if (!absl::ParseTime(absl::RFC3339_full, ToAbsl(value), &time, &error)) {
    return absl::InvalidArgumentError(StrCat("bad ISO 8601 time '", Clip(value),
                                             "' (want e.g. 2009-10-12T17:50:30.000Z): ", error));
  }
  return time;
}

absl::StatusOr<std::vector<ObjectInfo>> ParseListBuckets(std::string_view xml) {
  XMLDocument doc;
  absl::StatusOr<const XMLElement*> root =
      ParseRoot(doc, xml, "ListBuckets", "ListAllMyBucketsResult");
  if (!root.ok()) return root.status();
  std::vector<ObjectInfo> buckets;
  const XMLElement* list = Child(*root, "Buckets");
  if (list == nullptr) return buckets;
  for (const XMLElement* e = list->FirstChildElement(); e; e = e->NextSiblingElement()) {
    if (LocalName(e) != "Bucket") continue;
    const std::string where = StrCat("ListBuckets response: <Bucket> #", buckets.size() + 1);
    const XMLElement* name = Child(e, "Name");
    if (name == nullptr || Text(name).empty()) {
      return absl::InvalidArgumentError(StrCat(where, " has no <Name>"));
    }
    ObjectInfo bucket;
    bucket.key = Text(name);
    if (const XMLElement* created = Child(e, "CreationDate")) {
      absl::StatusOr<absl::Time> time = ParseIso8601(Text(created));
      if (!time.ok()) {
        return absl::InvalidArgumentError(
            StrCat(where, " <CreationDate>: ", time.status().message()));
      }
      bucket.mtime = *time;
    }
    buckets.push_back(std::move(bucket));
  }
  return buckets;
}

absl::StatusOr<ListObjectsV2Result> ParseListObjectsV2(std::string_view xml) {
  XMLDocument doc;
  absl::StatusOr<const XMLElement*> root_or =
      ParseRoot(doc, xml, "ListObjectsV2", "ListBucketResult");
  if (!root_or.ok()) return root_or.status();
  const XMLElement* root = *root_or;

  ListObjectsV2Result result;
  const bool url_encoded = ChildText(root, "EncodingType") == "url";
  int index = 0;
  for (const XMLElement* e = root->FirstChildElement(); e; e = e->NextSiblingElement()) {
    std::string_view name = LocalName(e);
    if (name == "Contents") {
      ++index;
      const std::string where = StrCat("ListObjectsV2 response: <Contents> #", index);
      const XMLElement* key = Child(e, "Key");
      if (key == nullptr) return absl::InvalidArgumentError(StrCat(where, " has no <Key>"));
      ObjectInfo object;
      absl::StatusOr<std::string> decoded =
          DecodeListedName(Text(key), url_encoded, StrCat(where, " <Key>"));
      if (!decoded.ok()) return decoded.status();
      object.key = *std::move(decoded);
      const XMLElement* size = Child(e, "Size");
      if (size == nullptr) return absl::InvalidArgumentError(StrCat(where, " has no <Size>"));
      absl::StatusOr<int64_t> bytes = ParseInt(Text(size), StrCat(where, " <Size>"));
      if (!bytes.ok()) return bytes.status();
      object.size = static_cast<uint64_t>(*bytes);
      object.etag = StripETagQuotes(ChildText(e, "ETag"));
      if (const XMLElement* modified = Child(e, "LastModified")) {
        absl::StatusOr<absl::Time> time = ParseIso8601(Text(modified));
        if (!time.ok()) {
          return absl::InvalidArgumentError(
              StrCat(where, " <LastModified>: ", time.status().message()));
        }
        object.mtime = *time;
      }
      result.contents.push_back(std::move(object));
    } else if (name == "CommonPrefixes") {
      const XMLElement* prefix = Child(e, "Prefix");
      if (prefix == nullptr) {
        return absl::InvalidArgumentError(
            "ListObjectsV2 response: <CommonPrefixes> has no <Prefix>");
      }
      absl::StatusOr<std::string> decoded =
          DecodeListedName(Text(prefix), url_encoded, "ListObjectsV2 response: <CommonPrefixes>");
      if (!decoded.ok()) return decoded.status();
      result.common_prefixes.push_back(*std::move(decoded));
    } else if (name == "IsTruncated") {
      absl::StatusOr<bool> truncated = ParseBool(Text(e), "ListObjectsV2 response: <IsTruncated>");
      if (!truncated.ok()) return truncated.status();
      result.is_truncated = *truncated;
    } else if (name == "NextContinuationToken") {
      result.next_continuation_token = Text(e);
    } else if (name == "KeyCount") {
      absl::StatusOr<int64_t> count = ParseInt(Text(e), "ListObjectsV2 response: <KeyCount>");
      if (!count.ok()) return count.status();
      result.key_count = *count;
    }
  }
  if (result.is_truncated && result.next_continuation_token.empty()) {
    return absl::InvalidArgumentError(
        "ListObjectsV2 response: <IsTruncated> is true but <NextContinuationToken> is missing");
  }
  return result;
}

absl::StatusOr<std::string> ParseInitiateMultipartUpload(std::string_view xml) {
  XMLDocument doc;
  absl::StatusOr<const XMLElement*> root =
      ParseRoot(doc, xml, "CreateMultipartUpload", "InitiateMultipartUploadResult");
  if (!root.ok()) return root.status();
  std::string upload_id = ChildText(*root, "UploadId");
  if (upload_id.empty()) {
    return absl::InvalidArgumentError(
        "CreateMultipartUpload response: <UploadId> is missing or empty");
  }
  return upload_id;
}

std::string BuildCompleteMultipartUpload(const std::vector<CompletedPart>& parts) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
      "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (const CompletedPart& part : parts) {
    xml += StrCat("<Part><PartNumber>", part.part_number, "</PartNumber><ETag>",
                  EscapeMarkup(StrCat("\"", StripETagQuotes(part.etag), "\"")), "</ETag></Part>");
  }
  xml += "</CompleteMultipartUpload>";
  return xml;
}

absl::StatusOr<std::string> ParseCompleteMultipartUpload(std::string_view xml, std::string_view url,
                                                         std::string_view access_key_id) {
  if (ParseError(xml).has_value()) {
    absl::Status status = S3ErrorToStatus(200, xml, url, access_key_id);
    return status.ok() ? absl::UnknownError(StrCat("multipart upload of ", url, " failed"))
                       : status;
  }
  XMLDocument doc;
  absl::StatusOr<const XMLElement*> root =
      ParseRoot(doc, xml, "CompleteMultipartUpload", "CompleteMultipartUploadResult");
  if (!root.ok()) return root.status();
  return StripETagQuotes(ChildText(*root, "ETag"));
}

std::optional<S3Error> ParseError(std::string_view xml) {
  if (xml.empty()) return std::nullopt;
  XMLDocument doc;
  if (doc.Parse(xml.data(), xml.size()) != tinyxml2::XML_SUCCESS) return std::nullopt;
  const XMLElement* root = doc.RootElement();
  if (root == nullptr || LocalName(root) != "Error") return std::nullopt;
  S3Error error;
  error.code = ChildText(root, "Code");
  error.message = ChildText(root, "Message");
  error.resource = ChildText(root, "Resource");
  error.request_id = ChildText(root, "RequestId");
  return error;
}

absl::Status S3ErrorToStatus(int http_status, std::string_view body, std::string_view url,
                             std::string_view access_key_id) {
  const std::optional<S3Error> error = ParseError(body);
  const bool success = http_status >= 200 && http_status < 300;
  if (success && !error.has_value()) return absl::OkStatus();

  const std::string code = error ? error->code : "";
  // What the server said, for the end of every message.
  std::string detail = StrCat(" (HTTP ", http_status);
  if (!code.empty()) detail += StrCat(", ", Clip(code));
  if (error && !error->message.empty()) detail += StrCat(": ", Clip(error->message));
  if (error && !error->request_id.empty()) {
    detail += StrCat("; request id ", Clip(error->request_id));
  }
  detail += ")";

  auto is = [&](std::initializer_list<std::string_view> codes) {
    for (std::string_view c : codes) {
      if (code == c) return true;
    }
    return false;
  };
  const bool known = is({"NoSuchKey", "NoSuchBucket", "NoSuchUpload", "AccessDenied",
                         "InvalidAccessKeyId", "SignatureDoesNotMatch", "RequestTimeTooSkewed",
                         "ExpiredToken", "InvalidToken", "InvalidRange", "PreconditionFailed",
                         "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"});
  // A known code decides; otherwise (no body, or a code we do not know) the HTTP status does.
  const int status = http_status;

  if (is({"NoSuchBucket"})) {
    return absl::NotFoundError(StrCat("bucket of ", url, " does not exist", detail));
  }
  if (is({"NoSuchUpload"})) {
    return absl::NotFoundError(
        StrCat("multipart upload of ", url, " no longer exists (aborted or completed)", detail));
  }
  if (is({"NoSuchKey"}) || (!known && status == 404)) {
    return absl::NotFoundError(StrCat("object not found: ", url, detail));
  }

  if (is({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "RequestTimeTooSkewed",
          "ExpiredToken", "InvalidToken"}) ||
      (!known && (status == 401 || status == 403))) {
    std::string who = access_key_id.empty() ? std::string("without credentials (anonymous request)")
                                            : StrCat("with access key id ", access_key_id);
    std::string hint;
    if (access_key_id.empty()) {
      hint = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile in ~/.aws/credentials)";
    } else if (code == "InvalidAccessKeyId") {
      hint =
          "the server does not know this key id; check AWS_ACCESS_KEY_ID (or the profile in "
          "~/.aws/credentials) and AWS_ENDPOINT_URL";
    } else if (code == "SignatureDoesNotMatch") {
      hint =
          "the secret does not match this key id; check AWS_SECRET_ACCESS_KEY (or the profile "
          "in ~/.aws/credentials) and AWS_REGION";
    } else if (code == "RequestTimeTooSkewed") {
      hint = "this machine's clock is too far from the server's; synchronise it (NTP)";
    } else if (code == "ExpiredToken" || code == "InvalidToken") {
      hint = "the session token is expired or invalid; refresh AWS_SESSION_TOKEN";
    } else {
      hint =
          "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and that this key may access the "
          "bucket";
    }
    return absl::PermissionDeniedError(
        StrCat("access to ", url, " denied ", who, "; ", hint, detail));
  }

  if (is({"InvalidRange"}) || (!known && status == 416)) {
    return absl::OutOfRangeError(StrCat("requested range is past the end of ", url, detail));
  }
  if (is({"PreconditionFailed"}) || (!known && status == 412)) {
    return absl::FailedPreconditionError(
        StrCat("object changed (ETag no longer matches): ", url, detail));
  }
  if (is({"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"}) ||
      (!known && (status == 500 || status == 502 || status == 503 || status == 504))) {
    return absl::UnavailableError(StrCat("S3 temporarily failed for ", url, detail));
  }
  std::string hint;
  if (is({"PermanentRedirect", "TemporaryRedirect", "AuthorizationHeaderMalformed",
          "IllegalLocationConstraintException"}) ||
      (code.empty() && (status == 301 || status == 307))) {
    hint = "; the bucket may be in another region: check AWS_REGION and AWS_ENDPOINT_URL";
  }
  return absl::UnknownError(StrCat("S3 request for ", url, " failed", hint, detail));
}

}  // namespace stoker::io::s3
