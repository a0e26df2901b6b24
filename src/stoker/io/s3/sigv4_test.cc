// The expected values below are AWS's published examples: the "Signature Calculations for the
// Authorization Header" examples of the S3 API reference (examplebucket, 2013-05-24) and the
// get-vanilla case of the generic SigV4 test suite (example.amazonaws.com, 2015-08-30).
#include "stoker/io/s3/sigv4.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stoker::io::s3 {
namespace {

constexpr char kS3Host[] = "examplebucket.s3.amazonaws.com";
constexpr char kEmpty[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

Credentials S3ExampleCredentials() {
  return {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
}

absl::Time S3ExampleTime() {
  return absl::FromCivil(absl::CivilSecond(2013, 5, 24, 0, 0, 0), absl::UTCTimeZone());
}

SignInput S3Example(std::string method, std::string uri, QueryParams query,
                    std::vector<HttpHeader> headers, std::string payload_hash) {
  SignInput in;
  in.method = std::move(method);
  in.host = kS3Host;
  in.canonical_uri = std::move(uri);
  in.query = std::move(query);
  in.headers = std::move(headers);
  in.payload_hash = std::move(payload_hash);
  in.region = "us-east-1";
  in.service = "s3";
  in.credentials = S3ExampleCredentials();
  in.time = S3ExampleTime();
  return in;
}

std::string HeaderValue(const std::vector<HttpHeader>& headers, std::string_view name) {
  for (const auto& h : headers) {
    if (h.name == name) return h.value;
  }
  return "<missing>";
}

TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), kEmpty);
  EXPECT_EQ(Sha256Hex("Welcome to Amazon S3."),
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  EXPECT_EQ(kEmptyPayloadSha256, kEmpty);
}

TEST(SigV4Test, Dates) {
  EXPECT_EQ(AmzDate(S3ExampleTime()), "20130524T000000Z");
  EXPECT_EQ(DateStamp(S3ExampleTime()), "20130524");
  EXPECT_EQ(CredentialScope(S3ExampleTime(), "us-east-1", "s3"),
            "20130524/us-east-1/s3/aws4_request");
}

// S3 example "GET Object": the first 10 bytes of test.txt, every step checked.
TEST(SigV4Test, S3GetObjectExample) {
  SignedRequest r =
      SignRequest(S3Example("GET", "/test.txt", {}, {{"Range", "bytes=0-9"}}, kEmpty));
  EXPECT_EQ(
      r.canonical_request,
      "GET\n"
      "/test.txt\n"
      "\n"
      "host:examplebucket.s3.amazonaws.com\n"
      "range:bytes=0-9\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n"
      "\n"
      "host;range;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(r.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(r.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(HeaderValue(r.headers_to_add, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(HeaderValue(r.headers_to_add, "X-Amz-Date"), "20130524T000000Z");
  EXPECT_EQ(HeaderValue(r.headers_to_add, "X-Amz-Content-Sha256"), kEmpty);
  EXPECT_EQ(HeaderValue(r.headers_to_add, "X-Amz-Security-Token"), "<missing>");
}

// The same example through the step functions one by one.
TEST(SigV4Test, S3GetObjectExampleStepByStep) {
  CanonicalInput in;
  in.method = "GET";
  in.canonical_uri = "/test.txt";
  in.headers = {{"Host", kS3Host},
                {"Range", "bytes=0-9"},
                {"x-amz-content-sha256", kEmpty},
                {"x-amz-date", "20130524T000000Z"}};
  in.payload_hash = kEmpty;
  const std::string canonical = CanonicalRequest(in);
  EXPECT_EQ(Sha256Hex(canonical),
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  const std::string sts =
      StringToSign(S3ExampleTime(), CredentialScope(S3ExampleTime(), "us-east-1", "s3"), canonical);
  const std::string key =
      SigningKey("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", S3ExampleTime(), "us-east-1", "s3");
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(Signature(key, sts),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// S3 example "PUT Object": a signed payload, a Date header and x-amz-storage-class.
TEST(SigV4Test, S3PutObjectExample) {
  SignedRequest r = SignRequest(S3Example(
      "PUT", "/test%24file.text", {},
      {{"Date", "Fri, 24 May 2013 00:00:00 GMT"}, {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
      Sha256Hex("Welcome to Amazon S3.")));
  EXPECT_EQ(
      r.canonical_request,
      "PUT\n"
      "/test%24file.text\n"
      "\n"
      "date:Fri, 24 May 2013 00:00:00 GMT\n"
      "host:examplebucket.s3.amazonaws.com\n"
      "x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
      "x-amz-date:20130524T000000Z\n"
      "x-amz-storage-class:REDUCED_REDUNDANCY\n"
      "\n"
      "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
      "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  EXPECT_EQ(r.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(r.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

// S3 example "GET Bucket Lifecycle": a query parameter without a value.
TEST(SigV4Test, S3GetBucketLifecycleExample) {
  SignedRequest r = SignRequest(S3Example("GET", "/", {{"lifecycle", ""}}, {}, kEmpty));
  EXPECT_EQ(
      r.canonical_request,
      "GET\n"
      "/\n"
      "lifecycle=\n"
      "host:examplebucket.s3.amazonaws.com\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n"
      "\n"
      "host;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(r.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  EXPECT_EQ(r.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

// S3 example "Get Bucket (List Objects)": max-keys=2&prefix=J; given out of order here, the
// canonical query sorts it.
TEST(SigV4Test, S3ListObjectsExample) {
  SignedRequest r =
      SignRequest(S3Example("GET", "/", {{"prefix", "J"}, {"max-keys", "2"}}, {}, kEmpty));
  EXPECT_EQ(
      r.canonical_request,
      "GET\n"
      "/\n"
      "max-keys=2&prefix=J\n"
      "host:examplebucket.s3.amazonaws.com\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n"
      "\n"
      "host;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(r.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(r.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// The generic SigV4 test suite's get-vanilla (service "service"; no x-amz-content-sha256), through
// the step functions.
TEST(SigV4Test, TestSuiteGetVanilla) {
  const absl::Time time =
      absl::FromCivil(absl::CivilSecond(2015, 8, 30, 12, 36, 0), absl::UTCTimeZone());
  CanonicalInput in;
  in.method = "GET";
  in.canonical_uri = "/";
  in.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  in.payload_hash = kEmpty;
  const std::string canonical = CanonicalRequest(in);
  EXPECT_EQ(canonical,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string scope = CredentialScope(time, "us-east-1", "service");
  EXPECT_EQ(scope, "20150830/us-east-1/service/aws4_request");
  const std::string sts = StringToSign(time, scope, canonical);
  EXPECT_EQ(sts, "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n" +
                     Sha256Hex(canonical));
  const std::string key =
      SigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", time, "us-east-1", "service");
  EXPECT_EQ(Signature(key, sts),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4Test, CanonicalHeadersTrimCollapseAndJoinRepeats) {
  CanonicalInput in;
  in.method = "GET";
  in.headers = {{"My-Header1", "  a   b   c  "}, {"my-header2", "x"}, {"My-Header2", "y"}};
  in.payload_hash = kEmpty;
  EXPECT_EQ(CanonicalRequest(in),
            "GET\n/\n\nmy-header1:a b c\nmy-header2:x,y\n\nmy-header1;my-header2\n" +
                std::string(kEmpty));
  EXPECT_EQ(SignedHeaders(in.headers), "my-header1;my-header2");
}

TEST(SigV4Test, SessionTokenIsSentAndSigned) {
  SignInput in = S3Example("GET", "/test.txt", {}, {}, std::string(kUnsignedPayload));
  in.credentials.session_token = "token/with+chars";
  SignedRequest r = SignRequest(in);
  EXPECT_EQ(HeaderValue(r.headers_to_add, "X-Amz-Security-Token"), "token/with+chars");
  EXPECT_THAT(r.canonical_request, testing::HasSubstr("x-amz-security-token:token/with+chars\n"));
  EXPECT_THAT(HeaderValue(r.headers_to_add, "Authorization"),
              testing::HasSubstr("SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                                 "x-amz-security-token,"));
  EXPECT_THAT(r.canonical_request, testing::EndsWith("\nUNSIGNED-PAYLOAD"));
  // Changing the token changes the signature.
  in.credentials.session_token = "other";
  EXPECT_NE(SignRequest(in).signature, r.signature);
}

TEST(SigV4Test, NoSecretInOutputs) {
  SignedRequest r = SignRequest(S3Example("GET", "/test.txt", {}, {}, kEmpty));
  for (const auto& h : r.headers_to_add) {
    EXPECT_THAT(h.value, testing::Not(testing::HasSubstr("wJalrXUtnFEMI")));
  }
  EXPECT_THAT(r.canonical_request + r.string_to_sign, testing::Not(testing::HasSubstr("wJalrXU")));
}

}  // namespace
}  // namespace stoker::io::s3
