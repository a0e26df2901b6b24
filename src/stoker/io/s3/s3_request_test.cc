#include "stoker/io/s3/s3_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stoker::io::s3 {
namespace {

using testing::HasSubstr;

absl::Time ExampleTime() {
  return absl::FromCivil(absl::CivilSecond(2013, 5, 24, 0, 0, 0), absl::UTCTimeZone());
}

S3Config AwsExampleConfig() {
  S3Config config;
  config.endpoint = "https://s3.amazonaws.com";
  config.region = "us-east-1";
  config.path_style = false;
  config.credentials = {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  return config;
}

std::string HeaderValue(const std::vector<HttpHeader>& headers, std::string_view name) {
  for (const auto& h : headers) {
    if (h.name == name) return h.value;
  }
  return "<missing>";
}

TEST(UriEncodeTest, S3Rules) {
  EXPECT_EQ(UriEncode("AZaz09-_.~", true), "AZaz09-_.~");
  EXPECT_EQ(UriEncode("a b", true), "a%20b");
  EXPECT_EQ(UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(UriEncode("a/b", false), "a/b");
  EXPECT_EQ(UriEncode("test$file.text", false), "test%24file.text");
  EXPECT_EQ(UriEncode("+=&?#%*", true), "%2B%3D%26%3F%23%25%2A");
  EXPECT_EQ(UriEncode("\xC3\xA9", true), "%C3%A9");  // é in UTF-8, upper-case hex
  EXPECT_EQ(UriEncode(std::string("\0\xff", 2), true), "%00%FF");
}

TEST(UriEncodeTest, DecodeRoundTripsAndRejectsBadEscapes) {
  for (std::string s : {"a b/c+d=\xC3\xA9", "%", "plain", ""}) {
    EXPECT_EQ(*UriDecode(UriEncode(s, true)), s);
  }
  EXPECT_EQ(*UriDecode("a+b"), "a+b");
  EXPECT_FALSE(UriDecode("%4").ok());
  EXPECT_FALSE(UriDecode("%zz").ok());
}

TEST(CanonicalQueryTest, SortedEncodedAndValueless) {
  EXPECT_EQ(CanonicalQueryString({}), "");
  EXPECT_EQ(CanonicalQueryString({{"uploads", ""}}), "uploads=");
  EXPECT_EQ(CanonicalQueryString({{"prefix", "a b/c"}, {"list-type", "2"}, {"delimiter", "/"}}),
            "delimiter=%2F&list-type=2&prefix=a%20b%2Fc");
  EXPECT_EQ(CanonicalQueryString({{"b", "2"}, {"a", "y"}, {"a", "x"}}), "a=x&a=y&b=2");
  // Sorted by encoded name: upper case before lower case.
  EXPECT_EQ(CanonicalQueryString({{"a", "1"}, {"B", "2"}}), "B=2&a=1");
}

// BuildRequest reproduces AWS's "GET Object" example end to end (virtual-hosted).
TEST(BuildRequestTest, AwsGetObjectExample) {
  S3Config config = AwsExampleConfig();
  auto request = BuildRequest(config, "GET", "examplebucket", "test.txt", {},
                              {{"Range", "bytes=0-9"}}, kEmptyPayloadSha256, ExampleTime());
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->method, "GET");
  EXPECT_EQ(request->url, "https://examplebucket.s3.amazonaws.com/test.txt");
  ASSERT_FALSE(request->headers.empty());
  EXPECT_EQ(request->headers[0], (HttpHeader{"Host", "examplebucket.s3.amazonaws.com"}));
  EXPECT_EQ(HeaderValue(request->headers, "Range"), "bytes=0-9");
  EXPECT_EQ(HeaderValue(request->headers, "X-Amz-Date"), "20130524T000000Z");
  EXPECT_THAT(
      HeaderValue(request->headers, "Authorization"),
      HasSubstr("Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
}

TEST(BuildRequestTest, AwsPutAndListExamples) {
  S3Config config = AwsExampleConfig();
  auto put = BuildRequest(
      config, "PUT", "examplebucket", "test$file.text", {},
      {{"Date", "Fri, 24 May 2013 00:00:00 GMT"}, {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
      "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072", ExampleTime());
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->url, "https://examplebucket.s3.amazonaws.com/test%24file.text");
  EXPECT_THAT(
      HeaderValue(put->headers, "Authorization"),
      HasSubstr("Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"));

  auto list = BuildRequest(config, "GET", "examplebucket", "", {{"prefix", "J"}, {"max-keys", "2"}},
                           {}, kEmptyPayloadSha256, ExampleTime());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->url, "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J");
  EXPECT_THAT(
      HeaderValue(list->headers, "Authorization"),
      HasSubstr("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"));
}

TEST(BuildRequestTest, PathStyleForCustomEndpoint) {
  S3Config config = AwsExampleConfig();
  config.endpoint = "http://127.0.0.1:8080";
  config.path_style = true;
  auto r = BuildRequest(config, "GET", "bucket", "dir/a b+c.jpg", {{"partNumber", "1"}}, {},
                        std::string(kUnsignedPayload), ExampleTime());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->url, "http://127.0.0.1:8080/bucket/dir/a%20b%2Bc.jpg?partNumber=1");
  EXPECT_EQ(HeaderValue(r->headers, "Host"), "127.0.0.1:8080");
  EXPECT_EQ(HeaderValue(r->headers, "X-Amz-Content-Sha256"), "UNSIGNED-PAYLOAD");

  auto bucket_level = BuildRequest(config, "GET", "bucket", "", {{"list-type", "2"}}, {},
                                   kEmptyPayloadSha256, ExampleTime());
  ASSERT_TRUE(bucket_level.ok());
  EXPECT_EQ(bucket_level->url, "http://127.0.0.1:8080/bucket?list-type=2");

  auto service = BuildRequest(config, "GET", "", "", {}, {}, kEmptyPayloadSha256, ExampleTime());
  ASSERT_TRUE(service.ok());
  EXPECT_EQ(service->url, "http://127.0.0.1:8080/");
}

TEST(BuildRequestTest, BasePathAndUpperCaseHost) {
  S3Config config = AwsExampleConfig();
  config.endpoint = "http://Example.COM:9000/s3/";
  config.path_style = true;
  auto r = BuildRequest(config, "HEAD", "b", "k", {}, {}, kEmptyPayloadSha256, ExampleTime());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->url, "http://example.com:9000/s3/b/k");
  EXPECT_EQ(HeaderValue(r->headers, "Host"), "example.com:9000");
}

TEST(BuildRequestTest, NonDnsBucketFallsBackToPathStyle) {
  S3Config config = AwsExampleConfig();
  auto r = BuildRequest(config, "GET", "my.dotted.bucket", "k", {}, {}, kEmptyPayloadSha256,
                        ExampleTime());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->url, "https://s3.amazonaws.com/my.dotted.bucket/k");
  EXPECT_TRUE(IsVirtualHostableBucket("my-bucket-1"));
  EXPECT_FALSE(IsVirtualHostableBucket("My_Bucket"));
  EXPECT_FALSE(IsVirtualHostableBucket("ab"));
  EXPECT_FALSE(IsVirtualHostableBucket("-ab"));
}

TEST(BuildRequestTest, AnonymousIsUnsigned) {
  S3Config config = AwsExampleConfig();
  config.credentials = {};
  auto r = BuildRequest(config, "GET", "examplebucket", "k", {}, {{"Range", "bytes=0-1"}},
                        kEmptyPayloadSha256, ExampleTime());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->headers.size(), 2u);
  EXPECT_EQ(r->headers[0].name, "Host");
  EXPECT_EQ(r->headers[1].name, "Range");
}

TEST(BuildRequestTest, SessionTokenHeader) {
  S3Config config = AwsExampleConfig();
  config.credentials.session_token = "tok";
  auto r =
      BuildRequest(config, "GET", "examplebucket", "k", {}, {}, kEmptyPayloadSha256, ExampleTime());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(HeaderValue(r->headers, "X-Amz-Security-Token"), "tok");
}

TEST(BuildRequestTest, BadEndpoint) {
  S3Config config = AwsExampleConfig();
  config.endpoint = "127.0.0.1:8080";
  EXPECT_EQ(BuildRequest(config, "GET", "b", "k", {}, {}, kEmptyPayloadSha256, ExampleTime())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::io::s3
