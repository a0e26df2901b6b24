#include "stoker/service/common/shm_ring.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <deque>
#include <string>

namespace stoker::service {
namespace {

TEST(ShmRing, AllocatesInOrderAndReusesReleasedSpace) {
  ShmRing ring(1024);
  auto a = ring.Allocate(100);  // rounded up to 128
  auto b = ring.Allocate(64);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(b->offset, 128u);
  EXPECT_NE(a->id, b->id);
  EXPECT_EQ(ring.used(), 192u);
  EXPECT_TRUE(ring.Release(a->id));
  EXPECT_FALSE(ring.Release(a->id));  // twice: ignored
  EXPECT_FALSE(ring.Release(999));    // unknown: ignored
  EXPECT_EQ(ring.live(), 1u);
  EXPECT_TRUE(ring.Release(b->id));
  EXPECT_EQ(ring.live(), 0u);
  EXPECT_EQ(ring.tracked(), 0u);
  auto c = ring.Allocate(1024);  // the whole ring again once empty
  ASSERT_TRUE(c);
  EXPECT_EQ(c->offset, 0u);
}

TEST(ShmRing, FullUntilTheOldestIsReleasedThenWraps) {
  ShmRing ring(1024);
  auto a = ring.Allocate(512);
  auto b = ring.Allocate(256);
  auto c = ring.Allocate(256);
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(ring.Allocate(64));  // full: the caller sends the bytes inline
  // Released out of order: b's space waits behind a (the oldest).
  EXPECT_TRUE(ring.Release(b->id));
  EXPECT_FALSE(ring.Allocate(64));
  EXPECT_TRUE(ring.Release(a->id));  // a and b free: [0, 768) reusable
  auto d = ring.Allocate(700);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->offset, 0u);          // wrapped
  EXPECT_FALSE(ring.Allocate(128));  // [768, 1024) is c's; [704, 768) is too small
  auto e = ring.Allocate(64);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->offset, 704u);
  EXPECT_FALSE(ring.Allocate(2048));  // larger than the ring: never
}

TEST(ShmRing, NoGrowthOverTenThousandElements) {
  ShmRing ring(uint64_t{1} << 20);
  std::deque<ShmRing::Slot> held;  // a consumer holding up to 8 elements, releasing in order
  int fallbacks = 0;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t size = 1000 + static_cast<uint64_t>(i % 7) * 20000;
    auto slot = ring.Allocate(size);
    if (!slot) {
      ++fallbacks;
    } else {
      held.push_back(*slot);
    }
    if (held.size() > 8) {
      EXPECT_TRUE(ring.Release(held.front().id));
      held.pop_front();
    }
    EXPECT_LE(ring.tracked(), 9u);
    EXPECT_LE(ring.used(), ring.capacity());
  }
  EXPECT_EQ(fallbacks, 0);
  while (!held.empty()) {
    EXPECT_TRUE(ring.Release(held.front().id));
    held.pop_front();
  }
  EXPECT_EQ(ring.tracked(), 0u);
}

// A consumer that holds up to `window` slots and releases them in the order it got them; an
// allocation the ring refuses (the bytes would go inline) is counted in `fallbacks`.
struct InOrderConsumer {
  ShmRing& ring;
  std::deque<ShmRing::Slot> held;
  int fallbacks = 0;

  void Run(uint64_t size, size_t window, int elements) {
    for (int i = 0; i < elements; ++i) {
      auto slot = ring.Allocate(size);
      if (!slot) {
        ++fallbacks;
      } else {
        held.push_back(*slot);
      }
      while (held.size() > window) {
        EXPECT_TRUE(ring.Release(held.front().id));
        held.pop_front();
      }
    }
  }
};

// Tiny elements (a batch of a few integers): the ring must not wrap into a lap as small as the
// few slots in flight at the start, or a consumer that later holds more (its prefetch filling
// while it is busy) finds the lap full and gets its elements inline. A lap is at least 4 MiB
// (or a quarter of a smaller segment).
TEST(ShmRing, TinyElementsLeaveRoomForMoreInFlightAfterWrapping) {
  ShmRing ring(uint64_t{256} << 20);
  InOrderConsumer consumer{ring};
  consumer.Run(200, 1, 1000);    // one in flight at a time
  consumer.Run(200, 500, 5000);  // then the consumer holds 500
  EXPECT_EQ(consumer.fallbacks, 0);
  EXPECT_LE(ring.touched(), uint64_t{5} << 20);
}

// A 256 MiB segment, 1 MiB elements, a consumer holding up to `window` of them (releasing in
// order): the ring keeps to about twice the window instead of touching the whole segment once per
// lap (each page it touches is a page fault on both sides), and it never falls back to inline
// bytes while the window grows.
TEST(ShmRing, TouchesAboutTwiceWhatIsInFlightNotTheCapacity) {
  const uint64_t mib = uint64_t{1} << 20;
  ShmRing ring(256 * mib);
  InOrderConsumer consumer{ring};
  consumer.Run(mib, 16, 2000);
  EXPECT_EQ(consumer.fallbacks, 0);
  EXPECT_LE(ring.touched(), 2 * 17 * mib + mib);
  consumer.Run(mib, 64, 2000);  // the consumer holds more: the ring grows, without a fallback
  EXPECT_EQ(consumer.fallbacks, 0);
  EXPECT_LE(ring.touched(), 2 * 65 * mib + mib);
  consumer.Run(mib, 200, 2000);  // most of the segment in flight
  EXPECT_EQ(consumer.fallbacks, 0);
  EXPECT_LE(ring.touched(), ring.capacity());
}

TEST(ShmSegment, ConsumerMapsWhatTheWorkerPlacedAndReleasesWhenDone) {
  auto segment = ShmSegment::Create(4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  const ShmSegmentInfo& info = (*segment)->info();
  EXPECT_EQ(info.pid, getpid());
  std::vector<Buffer> pieces = {Buffer::Copy("hello "), Buffer::Copy("shared memory")};
  auto slot = (*segment)->Place(pieces, 19, 7);
  ASSERT_TRUE(slot);
  auto mapping = ShmMapping::Open(info);
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  {
    auto bytes = (*mapping)->Slot(slot->id, slot->offset, 19);
    ASSERT_TRUE(bytes.ok());
    Buffer copy = bytes->Slice(6, 6);
    EXPECT_EQ(bytes->view(), "hello shared memory");
    EXPECT_TRUE((*mapping)->TakeReleased().empty());  // still referenced
    *bytes = Buffer();
    EXPECT_EQ(copy.view(), "shared");
  }
  const std::vector<int64_t> released = (*mapping)->TakeReleased();
  ASSERT_EQ(released, std::vector<int64_t>{slot->id});
  EXPECT_EQ((*segment)->live_slots(), 1u);
  (*segment)->Release(released[0], 7);
  EXPECT_EQ((*segment)->live_slots(), 0u);
  // A slot the segment cannot hold is refused, as is a range outside it.
  EXPECT_FALSE((*segment)->Place({Buffer::Copy(std::string(8192, 'x'))}, 8192, 7));
  EXPECT_FALSE((*mapping)->Slot(1, 4000, 200).ok());
  // Another inode at that path (the segment was replaced): refused.
  ShmSegmentInfo wrong = info;
  wrong.inode += 1;
  EXPECT_FALSE(ShmMapping::Open(wrong).ok());
}

// A cross-trainer job's element: one copy in the segment, a reference for each trainer that gets
// it; its slot is reused only once every reference (and the keeper's, until Drop) is released.
TEST(ShmSegment, SharedCopyIsOneSlotUntilItsLastReferenceIsReleased) {
  auto made = ShmSegment::Create(4096);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<ShmSegment> segment = *made;
  const std::vector<Buffer> pieces = {Buffer::Copy("batch "), Buffer::Copy("bytes")};
  auto copy = std::make_shared<ShmSharedCopy>();
  bool shared = true;
  auto a = copy->Get(segment, pieces, 11, /*holder=*/1, &shared);
  ASSERT_TRUE(a);
  EXPECT_FALSE(shared);
  auto b = copy->Get(segment, pieces, 11, /*holder=*/2, &shared);
  ASSERT_TRUE(b);
  EXPECT_TRUE(shared);
  EXPECT_EQ(b->offset, a->offset);  // the same bytes, under another reference
  EXPECT_NE(b->id, a->id);
  EXPECT_EQ(segment->live_slots(), 1u);
  auto mapping = ShmMapping::Open(segment->info());
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  auto bytes = (*mapping)->Slot(b->id, b->offset, 11);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->view(), "batch bytes");
  segment->Release(a->id, /*holder=*/2);  // another holder's reference: ignored
  segment->Release(a->id, 1);
  segment->Release(a->id, 1);  // twice: ignored
  segment->Release(b->id, 2);
  EXPECT_EQ(segment->live_slots(), 1u);  // the keeper's reference
  copy->Drop();
  EXPECT_EQ(segment->live_slots(), 0u);
  // Dropped and released by all: the next trainer gets a new copy, which a later one shares
  // while it is held, even after Drop.
  auto c = copy->Get(segment, pieces, 11, 3, &shared);
  ASSERT_TRUE(c);
  EXPECT_FALSE(shared);
  copy->Drop();
  auto d = copy->Get(segment, pieces, 11, 4, &shared);
  ASSERT_TRUE(d);
  EXPECT_TRUE(shared);
  EXPECT_EQ(d->offset, c->offset);
  // The job's segment was replaced: a copy there; the old one is held only by 3 and 4 now.
  auto replacement = ShmSegment::Create(4096);
  ASSERT_TRUE(replacement.ok());
  auto e = copy->Get(*replacement, pieces, 11, 5, &shared);
  ASSERT_TRUE(e);
  EXPECT_FALSE(shared);
  segment->Release(c->id, 3);
  EXPECT_EQ(segment->live_slots(), 1u);
  segment->Release(d->id, 4);
  EXPECT_EQ(segment->live_slots(), 0u);
  copy.reset();  // the keeper's reference goes with the window's element
  EXPECT_EQ((*replacement)->live_slots(), 1u);
  (*replacement)->Release(e->id, 5);
  EXPECT_EQ((*replacement)->live_slots(), 0u);
  // A copy the segment has no room for is refused.
  ShmSharedCopy large;
  EXPECT_FALSE(large.Get(segment, {Buffer::Copy(std::string(8192, 'x'))}, 8192, 6));
}

TEST(ShmSegment, MappedBytesOutliveTheWorkersSegment) {
  auto segment = ShmSegment::Create(4096);
  ASSERT_TRUE(segment.ok());
  auto slot = (*segment)->Place({Buffer::Copy("kept")}, 4, 7);
  ASSERT_TRUE(slot);
  auto mapping = ShmMapping::Open((*segment)->info());
  ASSERT_TRUE(mapping.ok());
  auto bytes = (*mapping)->Slot(slot->id, slot->offset, 4);
  ASSERT_TRUE(bytes.ok());
  segment->reset();  // the worker is gone (its fd closed, its mapping unmapped)
  mapping->reset();  // the consumer's handle, but not the element it holds
  EXPECT_EQ(bytes->view(), "kept");
}

TEST(ShmHostIdentity, NamesBootAndNamespaces) {
  const std::string& id = ShmHostIdentity();
  EXPECT_NE(id.find("net:["), std::string::npos) << id;
  EXPECT_NE(id.find("pid:["), std::string::npos) << id;
}

}  // namespace
}  // namespace stoker::service
