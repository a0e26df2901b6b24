#include "stoker/io/s3/s3_xml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stoker::io::s3 {
namespace {

using testing::HasSubstr;

constexpr char kListPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name>
  <Prefix>train/</Prefix>
  <KeyCount>3</KeyCount>
  <MaxKeys>2</MaxKeys>
  <Delimiter>/</Delimiter>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents>
    <Key>train/shard-000.stk</Key>
    <LastModified>2009-10-12T17:50:30.000Z</LastModified>
    <ETag>"fba9dede5f27731c9771645a39863328"</ETag>
    <Size>434234</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>train/a &amp; b.stk</Key>
    <Size>0</Size>
  </Contents>
  <CommonPrefixes><Prefix>train/cats/</Prefix></CommonPrefixes>
</ListBucketResult>)";

TEST(ListObjectsV2Test, ParsesAPage) {
  auto page = ParseListObjectsV2(kListPage);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->contents.size(), 2u);
  EXPECT_EQ(page->contents[0].key, "train/shard-000.stk");
  EXPECT_EQ(page->contents[0].size, 434234u);
  EXPECT_EQ(page->contents[0].etag, "fba9dede5f27731c9771645a39863328");
  EXPECT_EQ(page->contents[0].mtime,
            absl::FromCivil(absl::CivilSecond(2009, 10, 12, 17, 50, 30), absl::UTCTimeZone()));
  EXPECT_EQ(page->contents[1].key, "train/a & b.stk");
  EXPECT_EQ(page->contents[1].etag, "");
  EXPECT_EQ(page->contents[1].mtime, absl::UnixEpoch());
  EXPECT_EQ(page->common_prefixes, std::vector<std::string>{"train/cats/"});
  EXPECT_TRUE(page->is_truncated);
  EXPECT_EQ(page->next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  EXPECT_EQ(page->key_count, 3);
}

TEST(ListObjectsV2Test, EmptyAndMinimal) {
  auto page = ParseListObjectsV2("<ListBucketResult><Name>b</Name></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_TRUE(page->contents.empty());
  EXPECT_FALSE(page->is_truncated);
  EXPECT_EQ(page->key_count, -1);
}

TEST(ListObjectsV2Test, UrlEncodedKeys) {
  auto page = ParseListObjectsV2(
      "<ListBucketResult><EncodingType>url</EncodingType>"
      "<Contents><Key>dir/a+b%2Bc%C3%A9</Key><Size>1</Size></Contents>"
      "<CommonPrefixes><Prefix>x%2Fy/</Prefix></CommonPrefixes></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->contents[0].key, "dir/a b+c\xC3\xA9");
  EXPECT_EQ(page->common_prefixes[0], "x/y/");
}

TEST(ListObjectsV2Test, ErrorsNameTheElement) {
  struct Case {
    const char* xml;
    const char* names;
  };
  for (const Case& c : {
           Case{"", "not valid XML"},
           Case{"<ListBucketResult><Contents>", "not valid XML"},
           Case{"<Other/>", "<Other>"},
           Case{"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
                "<Contents> #1 has no <Key>"},
           Case{"<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
                "<Contents> #1 has no <Size>"},
           Case{"<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents>"
                "</ListBucketResult>",
                "<Size>"},
           Case{"<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents>"
                "</ListBucketResult>",
                "<Size>"},
           Case{"<ListBucketResult><Contents><Key>k</Key><Size>1</Size>"
                "<LastModified>yesterday</LastModified></Contents></ListBucketResult>",
                "<LastModified>"},
           Case{"<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
                "<IsTruncated>"},
           Case{"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
                "<NextContinuationToken>"},
           Case{"<ListBucketResult><KeyCount>many</KeyCount></ListBucketResult>", "<KeyCount>"},
           Case{"<ListBucketResult><CommonPrefixes/></ListBucketResult>", "<Prefix>"},
       }) {
    auto page = ParseListObjectsV2(c.xml);
    ASSERT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument) << c.xml;
    EXPECT_THAT(page.status().message(), HasSubstr(c.names)) << c.xml;
  }
}

TEST(ListBucketsTest, NamesAndCreationDates) {
  auto buckets = ParseListBuckets(R"(<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Owner><ID>o</ID></Owner>
  <Buckets>
    <Bucket><Name>cli</Name><CreationDate>2009-10-12T17:50:30.000Z</CreationDate></Bucket>
    <Bucket><Name>data</Name></Bucket>
  </Buckets>
</ListAllMyBucketsResult>)");
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  ASSERT_EQ(buckets->size(), 2u);
  EXPECT_EQ((*buckets)[0].key, "cli");
  EXPECT_EQ((*buckets)[0].mtime, absl::FromUnixSeconds(1255369830));
  EXPECT_EQ((*buckets)[1].key, "data");
  EXPECT_TRUE(ParseListBuckets("<ListAllMyBucketsResult/>")->empty());
  EXPECT_THAT(ParseListBuckets("<ListAllMyBucketsResult><Buckets><Bucket/></Buckets>"
                               "</ListAllMyBucketsResult>")
                  .status()
                  .message(),
              HasSubstr("<Bucket> #1 has no <Name>"));
  EXPECT_FALSE(ParseListBuckets("<ListBucketResult/>").ok());
}

TEST(Iso8601Test, Variants) {
  const absl::Time want =
      absl::FromCivil(absl::CivilSecond(2009, 10, 12, 17, 50, 30), absl::UTCTimeZone());
  EXPECT_EQ(*ParseIso8601("2009-10-12T17:50:30.000Z"), want);
  EXPECT_EQ(*ParseIso8601("2009-10-12T17:50:30Z"), want);
  EXPECT_EQ(*ParseIso8601("2009-10-12T19:50:30+02:00"), want);
  EXPECT_EQ(*ParseIso8601("2009-10-12T17:50:30.5Z"), want + absl::Milliseconds(500));
  EXPECT_FALSE(ParseIso8601("2009-10-12").ok());
  EXPECT_FALSE(ParseIso8601("infinite-future").ok());
  EXPECT_FALSE(ParseIso8601("").ok());
}

TEST(MultipartTest, InitiateResult) {
  auto id = ParseInitiateMultipartUpload(R"(<?xml version="1.0" encoding="UTF-8"?>
<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>example-bucket</Bucket>
  <Key>example-object</Key>
  <UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>
</InitiateMultipartUploadResult>)");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
  auto missing = ParseInitiateMultipartUpload("<InitiateMultipartUploadResult/>");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("<UploadId>"));
}

TEST(MultipartTest, BuildComplete) {
  std::string xml = BuildCompleteMultipartUpload(
      {{1, "\"a54357aff0632cce46d942af68356b38\""}, {2, "0c78aef83f66abc1fa1e8477f296d394"}});
  EXPECT_EQ(xml,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            "<Part><PartNumber>1</PartNumber>"
            "<ETag>&quot;a54357aff0632cce46d942af68356b38&quot;</ETag></Part>"
            "<Part><PartNumber>2</PartNumber>"
            "<ETag>&quot;0c78aef83f66abc1fa1e8477f296d394&quot;</ETag></Part>"
            "</CompleteMultipartUpload>");
}

TEST(MultipartTest, CompleteResultOrErrorInA200) {
  auto etag = ParseCompleteMultipartUpload(
      "<CompleteMultipartUploadResult><Location>http://x/b/k</Location><Bucket>b</Bucket>"
      "<Key>k</Key><ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag>"
      "</CompleteMultipartUploadResult>",
      "s3://b/k", "AKID");
  ASSERT_TRUE(etag.ok()) << etag.status();
  EXPECT_EQ(*etag, "3858f62230ac3c915f300c664312c11f-9");

  auto failed = ParseCompleteMultipartUpload(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<Error><Code>InternalError</Code>"
      "<Message>We encountered an internal error. Please try again.</Message>"
      "<RequestId>656c76696e6727732072657175657374</RequestId></Error>",
      "s3://b/k", "AKID");
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.status().message(), HasSubstr("s3://b/k"));
}

TEST(ErrorTest, ParseError) {
  auto error = ParseError(R"(<?xml version="1.0" encoding="UTF-8"?>
<Error>
  <Code>NoSuchKey</Code>
  <Message>The resource you requested does not exist</Message>
  <Resource>/mybucket/myfoto.jpg</Resource>
  <RequestId>4442587FB7D0A2F9</RequestId>
</Error>)");
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, "NoSuchKey");
  EXPECT_EQ(error->message, "The resource you requested does not exist");
  EXPECT_EQ(error->resource, "/mybucket/myfoto.jpg");
  EXPECT_EQ(error->request_id, "4442587FB7D0A2F9");
  EXPECT_FALSE(ParseError("").has_value());
  EXPECT_FALSE(ParseError("<ListBucketResult/>").has_value());
  EXPECT_FALSE(ParseError("not xml").has_value());
}

std::string ErrorBody(std::string_view code, std::string_view message = "msg") {
  return "<Error><Code>" + std::string(code) + "</Code><Message>" + std::string(message) +
         "</Message><RequestId>REQ1</RequestId></Error>";
}

TEST(ErrorTest, MapsCodesAndStatuses) {
  using absl::StatusCode;
  struct Case {
    int status;
    std::string body;
    StatusCode want;
  };
  for (const Case& c : {
           Case{200, "", StatusCode::kOk},
           Case{206, "partial bytes", StatusCode::kOk},
           Case{404, ErrorBody("NoSuchKey"), StatusCode::kNotFound},
           Case{404, ErrorBody("NoSuchBucket"), StatusCode::kNotFound},
           Case{404, "", StatusCode::kNotFound},
           Case{403, ErrorBody("InvalidAccessKeyId"), StatusCode::kPermissionDenied},
           Case{403, ErrorBody("SignatureDoesNotMatch"), StatusCode::kPermissionDenied},
           Case{403, ErrorBody("AccessDenied"), StatusCode::kPermissionDenied},
           Case{403, ErrorBody("RequestTimeTooSkewed"), StatusCode::kPermissionDenied},
           Case{403, "", StatusCode::kPermissionDenied},
           Case{416, ErrorBody("InvalidRange"), StatusCode::kOutOfRange},
           Case{416, "", StatusCode::kOutOfRange},
           Case{412, ErrorBody("PreconditionFailed"), StatusCode::kFailedPrecondition},
           Case{412, "", StatusCode::kFailedPrecondition},
           Case{503, ErrorBody("SlowDown"), StatusCode::kUnavailable},
           Case{503, "", StatusCode::kUnavailable},
           Case{500, ErrorBody("InternalError"), StatusCode::kUnavailable},
           Case{500, "<html>oops</html>", StatusCode::kUnavailable},
           Case{200, ErrorBody("InternalError"), StatusCode::kUnavailable},
           Case{200, ErrorBody("WeirdThing"), StatusCode::kUnknown},
           Case{400, ErrorBody("InvalidArgument"), StatusCode::kUnknown},
           Case{409, ErrorBody("BucketNotEmpty"), StatusCode::kUnknown},
       }) {
    EXPECT_EQ(S3ErrorToStatus(c.status, c.body, "s3://b/k", "AKID").code(), c.want)
        << c.status << " " << c.body;
  }
}

TEST(ErrorTest, MessagesNameUrlKeyAndWhatToCheck) {
  absl::Status not_found = S3ErrorToStatus(404, ErrorBody("NoSuchKey"), "s3://b/missing", "AKID");
  EXPECT_THAT(not_found.message(), HasSubstr("s3://b/missing"));
  EXPECT_THAT(not_found.message(), HasSubstr("REQ1"));

  absl::Status denied =
      S3ErrorToStatus(403, ErrorBody("SignatureDoesNotMatch"), "s3://b/k", "AKIDEXAMPLE");
  EXPECT_THAT(denied.message(), HasSubstr("AKIDEXAMPLE"));
  EXPECT_THAT(denied.message(), HasSubstr("AWS_SECRET_ACCESS_KEY"));
  EXPECT_THAT(denied.message(), HasSubstr("s3://b/k"));

  absl::Status skewed = S3ErrorToStatus(403, ErrorBody("RequestTimeTooSkewed"), "s3://b/k", "A");
  EXPECT_THAT(skewed.message(), HasSubstr("clock"));

  absl::Status unknown_key = S3ErrorToStatus(403, ErrorBody("InvalidAccessKeyId"), "s3://b", "K1");
  EXPECT_THAT(unknown_key.message(), HasSubstr("AWS_ACCESS_KEY_ID"));

  absl::Status anonymous = S3ErrorToStatus(403, "", "s3://b/k", "");
  EXPECT_THAT(anonymous.message(), HasSubstr("anonymous"));

  absl::Status other =
      S3ErrorToStatus(400, ErrorBody("InvalidArgument", "bad part"), "s3://b/k", "AKID");
  EXPECT_THAT(other.message(), HasSubstr("InvalidArgument"));
  EXPECT_THAT(other.message(), HasSubstr("bad part"));
  EXPECT_THAT(other.message(), HasSubstr("HTTP 400"));

  absl::Status region = S3ErrorToStatus(301, ErrorBody("PermanentRedirect"), "s3://b/k", "AKID");
  EXPECT_EQ(region.code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(region.message(), HasSubstr("AWS_REGION"));
}

TEST(ErrorTest, LongServerMessagesAreClipped) {
  absl::Status s = S3ErrorToStatus(400, ErrorBody("X", std::string(10000, 'm')), "s3://b/k", "A");
  EXPECT_LT(s.message().size(), 1000u);
}

TEST(ETagTest, StripsQuotes) {
  EXPECT_EQ(StripETagQuotes("\"abc\""), "abc");
  EXPECT_EQ(StripETagQuotes("W/\"abc\""), "abc");
  EXPECT_EQ(StripETagQuotes("abc"), "abc");
  EXPECT_EQ(StripETagQuotes("\""), "\"");
}

}  // namespace
}  // namespace stoker::io::s3
