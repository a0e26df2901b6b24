// DeviceBatcher on a real GPU: the kernel against the CPU reference (TransformBatchOnCpu, the same
// per-pixel function), plain copies, the staging ring under reuse, consumer-stream waits. Every
// case that needs a device skips, saying why, where CUDA finds none.
#include "stoker/gpu/device_batcher.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace stoker::gpu {
namespace {

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    std::string why;                                                           \
    if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Random values of `type` (finite floats in [-300, 300), small integers) as bytes.
std::vector<uint8_t> RandomValues(ScalarType type, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(count * ScalarSize(type));
  for (size_t i = 0; i < count; ++i) {
    switch (type) {
      case ScalarType::kUint8:
        out[i] = static_cast<uint8_t>(rng());
        break;
      case ScalarType::kInt32: {
        int32_t v = static_cast<int32_t>(rng() % 200001) - 100000;
        std::memcpy(&out[i * 4], &v, 4);
        break;
      }
      case ScalarType::kInt64: {
        int64_t v = static_cast<int64_t>(rng() % 2000001) - 1000000;
        std::memcpy(&out[i * 8], &v, 8);
        break;
      }
      case ScalarType::kFloat32: {
        float v = std::uniform_real_distribution<float>(-300, 300)(rng);
        std::memcpy(&out[i * 4], &v, 4);
        break;
      }
    }
  }
  return out;
}

TEST(DeviceBatcher, CreateSaysWhyWithoutADevice) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  auto b = DeviceBatcher::Create({});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("no CUDA device"), std::string::npos) << b.status();
}

TEST(DeviceBatcher, RejectsADeviceThatDoesNotExist) {
  REQUIRE_GPU();
  DeviceBatcherOptions o;
  o.device = 1000;
  auto b = DeviceBatcher::Create(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not exist"), std::string::npos) << b.status();
}

TEST(DeviceBatcher, PlainCopiesThroughTheRingSurviveReuse) {
  REQUIRE_GPU();
  DeviceBatcherOptions o;
  o.slots = 2;
  o.chunk_bytes = 1 << 16;  // several chunks per batch
  auto b = DeviceBatcher::Create(o);
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<std::vector<uint8_t>> hosts;
  std::vector<DeviceArray> arrays;
  for (int i = 0; i < 7; ++i) {  // more batches than slots, all held: every slot is reused
    hosts.push_back(RandomBytes(300000 + i * 1000, i));
    HostArray in{
        hosts.back().data(), ScalarType::kUint8, {static_cast<int64_t>(hosts.back().size())}};
    auto a = (*b)->Submit(in);
    ASSERT_TRUE(a.ok()) << a.status();
    arrays.push_back(*std::move(a));
  }
  for (int i = 0; i < 7; ++i) {
    auto back = DeviceBatcher::CopyToHost(arrays[i]);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, hosts[i]) << "batch " << i;
  }
  EXPECT_EQ((*b)->stats().batches, 7);
}

TEST(DeviceBatcher, KernelMatchesTheCpuReferenceForEveryTypePair) {
  REQUIRE_GPU();
  auto b = DeviceBatcher::Create({});
  ASSERT_TRUE(b.ok()) << b.status();
  const ScalarType types[] = {ScalarType::kUint8, ScalarType::kInt32, ScalarType::kInt64,
                              ScalarType::kFloat32};
  uint32_t seed = 1;
  for (ScalarType in_type : types) {
    for (ScalarType out_type : {in_type, ScalarType::kFloat32}) {
      for (bool chw : {false, true}) {
        for (bool affine : {false, true}) {
          if (affine && out_type != ScalarType::kFloat32) continue;
          SCOPED_TRACE(testing::Message() << "in " << int(in_type) << " out " << int(out_type)
                                          << " chw " << chw << " affine " << affine);
          TransformParams p;
          p.n = 6;
          p.in_h = 41;
          p.in_w = 67;
          p.channels = 3;
          p.out_h = 32;
          p.out_w = 48;
          p.out_chw = chw;
          p.affine = affine;
          for (int k = 0; k < 3; ++k) {
            NormalizeCoefficients(0.4 + 0.03 * k, 0.22 + 0.01 * k, 1.0 / 255, &p.scale[k],
                                  &p.shift[k]);
          }
          std::mt19937 rng(seed++);
          std::vector<SampleParams> samples(p.n);
          for (auto& s : samples) {
            s.y0 = static_cast<int32_t>(rng() % (p.in_h - p.out_h + 1));
            s.x0 = static_cast<int32_t>(rng() % (p.in_w - p.out_w + 1));
            s.flip = static_cast<int32_t>(rng() % 4);
          }
          const std::vector<uint8_t> in =
              RandomValues(in_type, size_t(p.n) * p.in_h * p.in_w * p.channels, seed);
          HostArray host{in.data(), in_type, {p.n, p.in_h, p.in_w, p.channels}};
          auto out = (*b)->SubmitTransform(host, p, samples, out_type);
          ASSERT_TRUE(out.ok()) << out.status();
          auto got = DeviceBatcher::CopyToHost(*out);
          ASSERT_TRUE(got.ok()) << got.status();
          std::vector<uint8_t> want(p.OutputValues() * ScalarSize(out_type));
          TransformBatchOnCpu(p, samples.data(), in_type, in.data(), out_type, want.data());
          ASSERT_EQ(got->size(), want.size());
          if (out_type != ScalarType::kFloat32) {
            EXPECT_EQ(*got, want);
          } else {
            double worst = 0;
            for (size_t i = 0; i < want.size() / 4; ++i) {
              float g, w;
              std::memcpy(&g, &(*got)[i * 4], 4);
              std::memcpy(&w, &want[i * 4], 4);
              worst = std::max(worst, static_cast<double>(std::fabs(g - w)));
            }
            EXPECT_LE(worst, 1e-6);
            EXPECT_EQ(*got, want) << "not bit-identical (max difference " << worst << ")";
          }
        }
      }
    }
  }
}

TEST(DeviceBatcher, AConsumerStreamWaitsForTheBatch) {
  REQUIRE_GPU();
  auto b = DeviceBatcher::Create({});
  ASSERT_TRUE(b.ok()) << b.status();
  cudaStream_t consumer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<uint8_t> host = RandomBytes(64 << 20, 9);
  auto a = (*b)->Submit({host.data(), ScalarType::kUint8, {int64_t(host.size())}});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->block->WaitOnStream(reinterpret_cast<uintptr_t>(consumer)).ok());
  std::vector<uint8_t> back(host.size());
  // Ordered on the consumer's stream only: correct only if the wait was queued.
  ASSERT_EQ(cudaMemcpyAsync(back.data(), a->data(), back.size(), cudaMemcpyDeviceToHost, consumer),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(back, host);
  a->block.reset();  // freed in the consumer stream's order
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  cudaStreamDestroy(consumer);
}

TEST(DeviceBatcher, ShapeMismatchIsAnError) {
  REQUIRE_GPU();
  auto b = DeviceBatcher::Create({});
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<uint8_t> in(2 * 8 * 8 * 3);
  TransformParams p;
  p.n = 2;
  p.in_h = p.in_w = 8;
  p.channels = 3;
  p.out_h = p.out_w = 9;
  auto out = (*b)->SubmitTransform({in.data(), ScalarType::kUint8, {2, 8, 8, 3}}, p,
                                   std::vector<SampleParams>(2), ScalarType::kUint8);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("larger"), std::string::npos) << out.status();
}

}  // namespace
}  // namespace stoker::gpu
