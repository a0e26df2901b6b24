#include "stoker/io/http/http_util.h"

#include <gtest/gtest.h>

namespace stoker::io {
namespace {

HttpResponse Partial(std::string content_range, std::string body) {
  HttpResponse r;
  r.status = 206;
  r.headers.emplace_back("content-range", std::move(content_range));
  r.body = Buffer::FromString(std::move(body));
  return r;
}

TEST(HttpUtilTest, RangeHeader) {
  EXPECT_EQ(RangeHeaderValue({0, 10}), "bytes=0-9");
  EXPECT_EQ(RangeHeaderValue({5, ByteRange::kToEnd}), "bytes=5-");
}

TEST(HttpUtilTest, PartialResponseMustMatchTheRange) {
  EXPECT_EQ(RangeFromResponse(Partial("bytes 2-4/10", "abc"), {2, 3}, "u")->view(), "abc");
  // Shorter than asked only at the end of the object.
  EXPECT_EQ(RangeFromResponse(Partial("bytes 8-9/10", "ab"), {8, 5}, "u")->view(), "ab");
  EXPECT_EQ(RangeFromResponse(Partial("bytes 2-3/10", "ab"), {2, 3}, "u").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(RangeFromResponse(Partial("bytes 2-4/10", "ab"), {2, 3}, "u").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(RangeFromResponse(Partial("garbage", "ab"), {2, 3}, "u").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(HttpUtilTest, FullResponseIsSliced) {
  HttpResponse r;
  r.status = 200;
  r.body = Buffer::Copy("0123456789");
  EXPECT_EQ(RangeFromResponse(r, {3, 2}, "u")->view(), "34");
  EXPECT_EQ(RangeFromResponse(r, {11, 2}, "u").status().code(), absl::StatusCode::kOutOfRange);
}

TEST(HttpUtilTest, StatusMapping) {
  EXPECT_EQ(HttpStatusToStatus(404, "u").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(HttpStatusToStatus(403, "u").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(HttpStatusToStatus(503, "u").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(HttpStatusToStatus(416, "u").code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(HttpStatusToStatus(418, "u").code(), absl::StatusCode::kUnknown);
}

TEST(HttpDateTest, ParsesImfFixdate) {
  auto t = ParseHttpDate("Wed, 12 Oct 2009 17:50:00 GMT");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, absl::FromCivil(absl::CivilSecond(2009, 10, 12, 17, 50, 0), absl::UTCTimeZone()));
  EXPECT_FALSE(ParseHttpDate("yesterday").ok());
  EXPECT_FALSE(ParseHttpDate("infinite-past").ok());
  EXPECT_FALSE(ParseHttpDate("").ok());
}

}  // namespace
}  // namespace stoker::io
