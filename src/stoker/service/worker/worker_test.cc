// The worker's element stream as a client sees it: send cursors, restart after a lost response,
// dropping on next_index, and the end of a stream. A real Dispatcher and Worker on loopback; the
// test calls Worker::GetElements directly and parses the reply bytes with the generated protobuf
// code, as the client stub does.
#include "stoker/service/worker/worker.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "stoker/data/pipeline.h"
#include "stoker/service/common/elements_response.h"
#include "stoker/service/dispatcher/dispatcher.h"

namespace stoker::service {
namespace {

GetElementsResponse Parse(const grpc::ByteBuffer& buffer) {
  GetElementsResponse resp;
  EXPECT_TRUE(ParseElementsResponse(buffer, &resp));
  return resp;
}

std::vector<int64_t> Indices(const GetElementsResponse& resp) {
  std::vector<int64_t> out;
  for (const auto& e : resp.elements()) out.push_back(e.index());
  return out;
}

// Maps the segment a reply names, as the client does.
void MapReplySegment(const GetElementsResponse& resp, std::shared_ptr<ShmMapping>* mapping) {
  ShmSegmentInfo info;
  info.id = resp.shm().id();
  info.pid = resp.shm().pid();
  info.fd = resp.shm().fd();
  info.size = static_cast<uint64_t>(resp.shm().size());
  info.inode = static_cast<uint64_t>(resp.shm().inode());
  auto m = ShmMapping::Open(info);
  ASSERT_TRUE(m.ok()) << m.status();
  *mapping = *std::move(m);
}

class WorkerStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DispatcherOptions d;
    auto dispatcher = Dispatcher::Start(d);
    ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
    dispatcher_ = std::move(*dispatcher);
    WorkerOptions w;
    w.dispatcher_address = "127.0.0.1:" + std::to_string(dispatcher_->port());
    w.heartbeat_interval = std::chrono::milliseconds(50);
    auto worker = Worker::Start(w);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
    // Sharding off: the worker runs the whole pipeline, so its stream is indices 0..kSamples-1.
    const std::string spec = "{\"source\": {\"range\": " + std::to_string(kSamples) + "}}";
    auto pipeline = data::Pipeline::FromString(spec);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    GetOrCreateJobRequest req;
    req.set_spec_json(spec);
    req.set_fingerprint((*pipeline)->fingerprint());
    req.set_sharding_mode(SHARDING_OFF);
    GetOrCreateJobResponse resp;
    ASSERT_TRUE(dispatcher_->GetOrCreateJob(req, &resp).ok());
    job_ = resp.job_id();
  }

  // One GetElements call; max_bytes 1 hands out one element per request.
  GetElementsResponse Get(int64_t next_index, bool restart, int64_t max_bytes = 1) {
    GetElementsRequest req;
    req.set_job_id(job_);
    req.set_client_id(7);
    req.set_next_index(next_index);
    req.set_max_bytes(max_bytes);
    req.set_restart(restart);
    grpc::ByteBuffer reply;
    EXPECT_TRUE(worker_->GetElements(req, &reply).ok());
    return Parse(reply);
  }

  // Waits (bounded) until the worker has produced the whole stream.
  void WaitForStreamEnd() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Get(0, true, 0).stream_end() == kSamples) return;
    }
    FAIL() << "the worker did not produce the stream in time";
  }

  static constexpr int kSamples = 40;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<Worker> worker_;
  int64_t job_ = 0;
};

TEST_F(WorkerStreamTest, CursorRestartDropAndEnd) {
  WaitForStreamEnd();
  // Requests in flight get consecutive elements, not the same ones.
  EXPECT_EQ(Indices(Get(0, true)), std::vector<int64_t>{0});
  EXPECT_EQ(Indices(Get(0, false)), std::vector<int64_t>{1});
  EXPECT_EQ(Indices(Get(0, false)), std::vector<int64_t>{2});
  // The response with 1 and 2 was "lost": restart from what the client holds (next_index 1).
  EXPECT_EQ(Indices(Get(1, true)), std::vector<int64_t>{1});
  EXPECT_EQ(Indices(Get(1, false)), std::vector<int64_t>{2});
  // next_index 3 drops 0..2 for good: a restart cannot go back before it.
  EXPECT_EQ(Indices(Get(3, false)), std::vector<int64_t>{3});
  EXPECT_EQ(Indices(Get(0, true)), std::vector<int64_t>{3});
  // The rest in one request; the reply says the stream ended and how long it is.
  GetElementsResponse rest = Get(4, false, int64_t{1} << 20);
  ASSERT_EQ(rest.elements_size(), kSamples - 4);
  EXPECT_EQ(rest.elements(0).index(), 4);
  EXPECT_EQ(rest.elements(rest.elements_size() - 1).index(), kSamples - 1);
  EXPECT_TRUE(rest.end_of_stream());
  EXPECT_EQ(rest.stream_end(), kSamples);
  EXPECT_EQ(rest.elements(0).split_id(), -1);  // sharding off
  EXPECT_FALSE(rest.elements(0).payload().empty());
  // Nothing after the end; a restart still gets what was not acknowledged.
  EXPECT_TRUE(Get(4, false).elements().empty());
  EXPECT_EQ(Indices(Get(kSamples - 1, true)), std::vector<int64_t>{kSamples - 1});
}

// A consumer on this host (docs/protocol.md, "Shared memory"): the same elements, their payloads
// in the worker's segment; released slots are reused, so 12,000 elements pass through it without
// its use growing; a request without shm_host gets the bytes inline again.
TEST_F(WorkerStreamTest, SharedMemoryHandsTheSameBytesAndReusesReleasedSlots) {
  WaitForStreamEnd();
  GetElementsResponse inline_resp = Get(0, true, int64_t{1} << 20);
  ASSERT_EQ(inline_resp.elements_size(), kSamples);
  EXPECT_FALSE(inline_resp.has_shm());
  std::shared_ptr<ShmMapping> mapping;
  std::vector<int64_t> released;
  int64_t segment = 0;
  for (int round = 0; round < 300; ++round) {
    GetElementsRequest req;
    req.set_job_id(job_);
    req.set_client_id(7);
    req.set_max_bytes(int64_t{1} << 20);
    req.set_restart(true);  // the whole stream again
    req.set_shm_host(ShmHostIdentity());
    req.set_shm_segment(segment);
    req.mutable_shm_released()->Add(released.begin(), released.end());
    grpc::ByteBuffer reply;
    ASSERT_TRUE(worker_->GetElements(req, &reply).ok());
    GetElementsResponse resp = Parse(reply);
    ASSERT_EQ(resp.elements_size(), kSamples) << "round " << round;
    ASSERT_TRUE(resp.has_shm());
    if (!mapping) {
      ASSERT_NO_FATAL_FAILURE(MapReplySegment(resp, &mapping));
      segment = mapping->id();
    }
    ASSERT_EQ(resp.shm().id(), segment);
    for (int i = 0; i < kSamples; ++i) {
      const ElementData& d = resp.elements(i);
      ASSERT_TRUE(d.payload().empty());
      ASSERT_GT(d.shm_length(), 0);
      // Every slot released before this round: the ring starts again at 0 (no growth).
      if (i == 0) {
        ASSERT_EQ(d.shm_offset(), 0) << "round " << round;
      }
      auto bytes = mapping->Slot(d.shm_slot(), static_cast<uint64_t>(d.shm_offset()),
                                 static_cast<uint64_t>(d.shm_length()));
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      ASSERT_EQ(bytes->view(), inline_resp.elements(i).payload()) << "element " << i;
    }  // each Buffer released here
    released = mapping->TakeReleased();
    ASSERT_EQ(released.size(), static_cast<size_t>(kSamples));
  }
  // Without shm_host (the client turned it off): inline bytes again.
  GetElementsResponse again = Get(0, true, int64_t{1} << 20);
  ASSERT_EQ(again.elements_size(), kSamples);
  EXPECT_FALSE(again.has_shm());
  EXPECT_EQ(again.elements(0).payload(), inline_resp.elements(0).payload());
}

// Two trainers of a cross-trainer job on this host (docs/protocol.md, "Shared memory"): one
// segment for both, and each element is one copy in it, which both get a reference to (the same
// offset and bytes); each releases its own references.
TEST(WorkerTrainersTest, TrainersOnThisHostShareOneCopyOfEachElement) {
  auto dispatcher = Dispatcher::Start(DispatcherOptions{});
  ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
  WorkerOptions w;
  w.dispatcher_address = "127.0.0.1:" + std::to_string((*dispatcher)->port());
  w.heartbeat_interval = std::chrono::milliseconds(50);
  auto worker = Worker::Start(w);
  ASSERT_TRUE(worker.ok()) << worker.status();
  constexpr int kElements = 24;
  const std::string spec = R"({"source": {"range": 24}})";
  auto pipeline = data::Pipeline::FromString(spec);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  GetOrCreateJobRequest job;
  job.set_spec_json(spec);
  job.set_fingerprint((*pipeline)->fingerprint());
  job.set_job_name("shared");
  job.set_cross_trainer_cache(true);
  GetOrCreateJobResponse created;
  ASSERT_TRUE((*dispatcher)->GetOrCreateJob(job, &created).ok());
  struct Trainer {
    int64_t client;
    std::string id;
    int64_t next = 0;
    std::shared_ptr<ShmMapping> mapping;
    std::vector<int64_t> released;
    int64_t got = 0;  // elements with a payload (the stream's end needs the dispatcher's acks)
  };
  Trainer trainers[2] = {{7, "a"}, {8, "b"}};
  // Per index: the offset and bytes the first trainer got.
  std::map<int64_t, std::pair<int64_t, std::string>> first;
  int64_t shared = 0, payloads = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (trainers[0].got < kElements || trainers[1].got < kElements) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the trainers did not get the stream";
    // Both hold what they got until both have asked for the same elements.
    std::vector<Buffer> held;
    for (Trainer& t : trainers) {
      GetElementsRequest req;
      req.set_job_id(created.job_id());
      req.set_client_id(t.client);
      req.set_trainer_id(t.id);
      req.set_next_index(t.next);
      req.set_max_bytes(64);
      req.set_shm_host(ShmHostIdentity());
      if (t.mapping) req.set_shm_segment(t.mapping->id());
      req.mutable_shm_released()->Add(t.released.begin(), t.released.end());
      grpc::ByteBuffer reply;
      ASSERT_TRUE((*worker)->GetElements(req, &reply).ok());
      GetElementsResponse resp = Parse(reply);
      if (resp.has_shm() && (!t.mapping || t.mapping->id() != resp.shm().id()))
        ASSERT_NO_FATAL_FAILURE(MapReplySegment(resp, &t.mapping));
      for (const ElementData& d : resp.elements()) {
        t.next = d.index() + 1;
        if (d.shm_length() == 0) continue;  // an end-of-split marker
        ++payloads;
        ++t.got;
        auto bytes = t.mapping->Slot(d.shm_slot(), static_cast<uint64_t>(d.shm_offset()),
                                     static_cast<uint64_t>(d.shm_length()));
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        auto [it, new_index] =
            first.try_emplace(d.index(), d.shm_offset(), std::string(bytes->view()));
        if (!new_index) {
          EXPECT_EQ(d.shm_offset(), it->second.first) << "element " << d.index();
          EXPECT_EQ(bytes->view(), it->second.second) << "element " << d.index();
          ++shared;
        }
        held.push_back(*std::move(bytes));
      }
    }
    held.clear();
    for (Trainer& t : trainers)
      if (t.mapping) t.released = t.mapping->TakeReleased();
  }
  EXPECT_EQ(static_cast<int64_t>(first.size()), kElements);
  EXPECT_EQ(payloads, 2 * kElements);
  EXPECT_EQ(shared, kElements);  // the second trainer's every element
  ASSERT_TRUE(trainers[0].mapping && trainers[1].mapping);
  EXPECT_EQ(trainers[0].mapping->id(), trainers[1].mapping->id());  // one segment
}

TEST_F(WorkerStreamTest, NegativeIndexAndUnknownJob) {
  GetElementsRequest req;
  req.set_job_id(job_);
  req.set_next_index(-5);
  grpc::ByteBuffer reply;
  absl::Status s = worker_->GetElements(req, &reply);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  req.set_job_id(987654);  // not a task here: an empty reply after a short wait, not an error
  req.set_next_index(0);
  ASSERT_TRUE(worker_->GetElements(req, &reply).ok());
  GetElementsResponse resp = Parse(reply);
  EXPECT_TRUE(resp.elements().empty());
  EXPECT_EQ(resp.stream_end(), -1);
}

}  // namespace
}  // namespace stoker::service
