// S3Store against the real Swift + s3api test server (label "s3").
#include "stoker/io/s3/s3_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <random>

#include "stoker/io/url.h"
#include "stoker/testing/fault_proxy.h"
#include "stoker/testing/s3_server.h"

namespace stoker::io {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen());
  return s;
}

class S3StoreTest : public testing::S3ServerTest {
 protected:
  void SetUp() override {
    S3ServerTest::SetUp();
    if (HasFatalFailure()) return;
    static bool created = false;  // the server is shared by every test of this process
    if (!created) {
      absl::Status status = s3().CreateBucket(bucket_);
      ASSERT_TRUE(status.ok()) << status;
      created = true;
    }
  }

  s3::S3Config Config(std::string secret = "") {
    s3::S3Config config;
    config.endpoint = s3().endpoint();
    config.region = s3().region();
    config.path_style = true;
    config.credentials.access_key_id = s3().access_key_id();
    config.credentials.secret_access_key = secret.empty() ? s3().secret_access_key() : secret;
    return config;
  }

  std::unique_ptr<S3Store> Store(S3StoreOptions options = {}) {
    return std::make_unique<S3Store>(Config(), bucket_, options);
  }

  const std::string bucket_ = "store-test";
};

TEST_F(S3StoreTest, PutStatReadRanges) {
  auto store = Store();
  std::string data = RandomBytes(100000, 1);
  ASSERT_TRUE(store->Put("dir/obj", Buffer::Copy(data)).ok());
  auto info = store->Stat("dir/obj");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, data.size());
  EXPECT_FALSE(info->etag.empty());
  EXPECT_EQ(store->Read("dir/obj")->view(), data);
  EXPECT_EQ(store->Read("dir/obj", {1000, 5000})->view(), data.substr(1000, 5000));
  EXPECT_EQ(store->Read("dir/obj", {99990, 100})->view(), data.substr(99990));
  EXPECT_EQ(store->Read("dir/obj", {100000, 0})->size(), 0u);
  auto past = store->Read("dir/obj", {100001, 10});
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange) << past.status();
}

TEST_F(S3StoreTest, EmptyObject) {
  auto store = Store();
  ASSERT_TRUE(store->Put("empty", Buffer()).ok());
  EXPECT_EQ(store->Stat("empty")->size, 0u);
  auto whole = store->Read("empty");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->size(), 0u);
}

TEST_F(S3StoreTest, MissingObjectIsNotFoundNamingTheUrl) {
  auto store = Store();
  auto read = store->Read("no/such/key");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("s3://store-test/no/such/key"));
  EXPECT_EQ(store->Stat("no/such/key").status().code(), absl::StatusCode::kNotFound);
  S3Store other(Config(), "no-such-bucket");
  EXPECT_EQ(other.Read("k").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(S3StoreTest, WrongSecretIsPermissionDeniedNamingKeyIdNotSecret) {
  S3Store store(Config("not-the-secret-xyz"), bucket_);
  auto read = store.Read("anything");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kPermissionDenied) << read.status();
  std::string message(read.status().message());
  EXPECT_THAT(message, HasSubstr("test:tester"));
  EXPECT_THAT(message, Not(HasSubstr("not-the-secret-xyz")));
}

TEST_F(S3StoreTest, UnreachableEndpointIsUnavailableAfterBoundedRetries) {
  s3::S3Config config = Config();
  config.endpoint = "http://127.0.0.1:1";
  S3StoreOptions options;
  options.retry.max_attempts = 3;
  options.retry.initial_backoff = absl::Milliseconds(1);
  S3Store store(config, bucket_, options);
  auto read = store.Read("k");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("3 attempts"));
}

TEST_F(S3StoreTest, IfMatchDetectsAChangedObject) {
  auto store = Store();
  ASSERT_TRUE(store->Put("changing", Buffer::Copy("one")).ok());
  std::string etag = store->Stat("changing")->etag;
  ASSERT_TRUE(store->Put("changing", Buffer::Copy("two!")).ok());
  std::promise<absl::StatusOr<Buffer>> promise;
  store->ReadAsync({"changing", {0, 3}, etag},
                   [&](absl::StatusOr<Buffer> r) { promise.set_value(std::move(r)); });
  EXPECT_EQ(promise.get_future().get().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(S3StoreTest, ListPaginatesAndRollsUpFolders) {
  S3StoreOptions options;
  options.list_page_size = 3;
  auto store = Store(options);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(store->Put("list/f" + std::to_string(i), Buffer::Copy("x")).ok());
  }
  ASSERT_TRUE(store->Put("list/sub/a", Buffer::Copy("x")).ok());
  ASSERT_TRUE(store->Put("list/sub/b", Buffer::Copy("x")).ok());
  auto deep = store->List({"list/", ""});
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(deep->objects.size(), 10u);
  auto shallow = store->List({"list/", "/"});
  ASSERT_TRUE(shallow.ok());
  EXPECT_EQ(shallow->objects.size(), 8u);
  EXPECT_THAT(shallow->common_prefixes, ::testing::ElementsAre("list/sub/"));
  EXPECT_EQ(store->List({"list/", "", 5})->objects.size(), 5u);
}

TEST_F(S3StoreTest, MultipartUploadReadsBackByteExactThroughTheAwsCli) {
  S3StoreOptions options;
  options.part_size = 5 << 20;
  options.multipart_threshold = 5 << 20;
  auto store = Store(options);
  std::string data = RandomBytes((17 << 20) + 12345, 2);
  auto writer = store->OpenWriter("big/object");
  ASSERT_TRUE(writer.ok());
  // Odd-sized appends exercise part cutting across buffers.
  for (size_t pos = 0; pos < data.size(); pos += 3'000'001) {
    ASSERT_TRUE(
        (*writer)->Append(Buffer::Copy(std::string_view(data).substr(pos, 3'000'001))).ok());
  }
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ(store->Stat("big/object")->size, data.size());
  EXPECT_EQ(store->Read("big/object")->view(), data);

  std::string local = ::testing::TempDir() + "/from-aws-cli";
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", "s3://store-test/big/object", local}).ok());
  std::ifstream in(local, std::ios::binary);
  std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(back == data);
}

TEST_F(S3StoreTest, AbandonedWriterLeavesNoObject) {
  S3StoreOptions options;
  options.part_size = 5 << 20;
  options.multipart_threshold = 5 << 20;
  auto store = Store(options);
  {
    auto writer = store->OpenWriter("abandoned");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Buffer::FromString(RandomBytes(6 << 20, 3))).ok());
  }
  EXPECT_EQ(store->Stat("abandoned").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(S3StoreTest, ObjectsUploadedByTheAwsCliReadBackThroughOpenUrl) {
  std::string local = ::testing::TempDir() + "/to-aws-cli";
  std::string data = RandomBytes(3'333'333, 4);
  std::ofstream(local, std::ios::binary) << data;
  ASSERT_TRUE(s3().RunAwsCli({"s3", "cp", local, "s3://store-test/from/cli"}).ok());
  auto target = OpenUrl("s3://store-test/from/cli");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->store->Read(target->key)->view(), data);
  EXPECT_EQ(target->store->Read(target->key, {3'000'000, 1000})->view(),
            data.substr(3'000'000, 1000));
  auto listing = target->store->List({"from/", "/"});
  ASSERT_EQ(listing->objects.size(), 1u);
  EXPECT_EQ(listing->objects[0].key, "from/cli");
}

// Faults injected between the store and the real server by the test FaultProxy.
class S3StoreFaultTest : public S3StoreTest {
 protected:
  void SetUp() override {
    S3StoreTest::SetUp();
    if (HasFatalFailure()) return;
    testing::FaultProxy::Options options;
    options.upstream_port = s3().port();
    auto proxy = testing::FaultProxy::Start(options);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
    data_ = RandomBytes(2'000'000, 5);
    ASSERT_TRUE(Store()->Put("faults/object", Buffer::Copy(data_)).ok());
  }

  std::unique_ptr<S3Store> ProxiedStore(S3StoreOptions options = {}) {
    options.retry.initial_backoff = absl::Milliseconds(5);
    s3::S3Config config = Config();
    config.endpoint = proxy_->endpoint();
    return std::make_unique<S3Store>(config, bucket_, options);
  }

  std::unique_ptr<testing::FaultProxy> proxy_;
  std::string data_;
};

TEST_F(S3StoreFaultTest, SlowDownAndServerErrorsAreRetried) {
  proxy_->AddRule({"GET", "faults/object", 2, 0, testing::FaultKind::kSlowDown503});
  proxy_->AddRule({"GET", "faults/object", 1, 0, testing::FaultKind::kInternalError500});
  auto read = ProxiedStore()->Read("faults/object", {100, 500'000});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->view() == std::string_view(data_).substr(100, 500'000));
  EXPECT_EQ(proxy_->faults_injected(), 3);
}

TEST_F(S3StoreFaultTest, ResetsAndTruncatedBodiesAreRetriedNeverReturnedShort) {
  testing::FaultRule reset{"GET", "faults/object", 2, 0, testing::FaultKind::kResetAfterBytes};
  reset.after_bytes = 1000;
  testing::FaultRule truncate{"GET", "faults/object", 2, 0, testing::FaultKind::kTruncateBody};
  truncate.after_bytes = 70'000;
  proxy_->AddRule(reset);
  proxy_->AddRule(truncate);
  auto read = ProxiedStore()->Read("faults/object");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), data_.size());
  EXPECT_TRUE(read->view() == data_);
  EXPECT_EQ(proxy_->faults_injected(testing::FaultKind::kResetAfterBytes), 2);
  EXPECT_EQ(proxy_->faults_injected(testing::FaultKind::kTruncateBody), 2);
}

TEST_F(S3StoreFaultTest, PersistentFailureIsUnavailableWithTheLastError) {
  proxy_->AddRule({"GET", "faults/object", 0, 1.0, testing::FaultKind::kSlowDown503});
  S3StoreOptions options;
  options.retry.max_attempts = 4;
  auto read = ProxiedStore(options)->Read("faults/object");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("4 attempts"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("SlowDown"));
  EXPECT_EQ(proxy_->faults_injected(), 4);
}

TEST_F(S3StoreFaultTest, MultipartPartFailuresAreRetried) {
  S3StoreOptions options;
  options.part_size = 5 << 20;
  options.multipart_threshold = 5 << 20;
  proxy_->AddRule({"PUT", "partNumber=2", 1, 0, testing::FaultKind::kInternalError500});
  testing::FaultRule reset{"PUT", "partNumber=1", 1, 0, testing::FaultKind::kResetAfterBytes};
  proxy_->AddRule(reset);
  std::string big = RandomBytes(11 << 20, 6);
  ASSERT_TRUE(ProxiedStore(options)->Put("faults/multipart", Buffer::Copy(big)).ok());
  EXPECT_EQ(proxy_->faults_injected(), 2);
  EXPECT_TRUE(Store()->Read("faults/multipart")->view() == big);
}

}  // namespace
}  // namespace stoker::io
