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

// A RangeSink driven as the transport drives it: Accept at the first byte, then the body in
// pieces, then Finish with the response (its body kept only when Accept declined).
struct SinkRun {
  std::string written;
  absl::StatusOr<uint64_t> result;
  bool accepted = false;
};
SinkRun RunSink(ByteRange requested, int status, HttpHeaders headers, std::string body) {
  SinkRun run;
  RangeSink sink(requested, "u", [&run](uint64_t offset, std::string_view data) {
    if (run.written.size() < offset + data.size()) run.written.resize(offset + data.size());
    run.written.replace(offset, data.size(), data);
    return absl::OkStatus();
  });
  HttpResponse response{status, headers};
  run.accepted = sink.Accept(status, headers);
  if (run.accepted) {
    for (size_t at = 0; at < body.size(); at += 3) EXPECT_TRUE(sink.Write(body.substr(at, 3)));
    response.body_sunk = true;
    response.sunk_bytes = body.size();
  } else {
    response.body = Buffer::FromString(std::move(body));
  }
  run.result = sink.Finish(response);
  return run;
}

TEST(RangeSinkTest, WritesAPartialResponseAsItArrives) {
  SinkRun run =
      RunSink({2, 5}, 206, {{"content-range", "bytes 2-6/10"}, {"content-length", "5"}}, "23456");
  EXPECT_TRUE(run.accepted);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(*run.result, 5u);
  EXPECT_EQ(run.written, "23456");
}

TEST(RangeSinkTest, CutsTheRangeOutOfAWholeObjectResponse) {
  // The server ignored Range: the pieces (3 bytes each) straddle the range's edges.
  SinkRun run = RunSink({4, 4}, 200, {{"content-length", "10"}}, "0123456789");
  EXPECT_TRUE(run.accepted);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(*run.result, 4u);
  EXPECT_EQ(run.written, "4567");
  SinkRun past = RunSink({12, 4}, 200, {{"content-length", "10"}}, "0123456789");
  EXPECT_EQ(past.result.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(past.written.empty());
}

TEST(RangeSinkTest, KeepsWhatItCannotPlaceAndFinishJudgesIt) {
  // Another range than asked, an error status, a body of unannounced length: nothing is written
  // as it arrives; Finish reports the error, or writes the kept body once it is judged good.
  SinkRun wrong =
      RunSink({2, 3}, 206, {{"content-range", "bytes 3-5/10"}, {"content-length", "3"}}, "345");
  EXPECT_FALSE(wrong.accepted);
  EXPECT_EQ(wrong.result.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(wrong.written.empty());
  SinkRun missing = RunSink({0, 3}, 404, {{"content-length", "9"}}, "not found");
  EXPECT_FALSE(missing.accepted);
  EXPECT_EQ(missing.result.status().code(), absl::StatusCode::kNotFound);
  SinkRun chunked = RunSink({1, 2}, 200, {}, "0123");
  EXPECT_FALSE(chunked.accepted);
  ASSERT_TRUE(chunked.result.ok()) << chunked.result.status();
  EXPECT_EQ(chunked.written, "12");
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
