// stoker_gpu_check: the device check of docs/gpu.md, run on a GPU machine by
// bench/gpu/run_device_check.sh. Prints Markdown (the body of bench/results/gpu.md):
//   1. kernels: the to_device transform (one fused kernel) against the pipeline's CPU ops, byte
//      for byte (uint8) and within 1e-6 (float32), and its time against the CPU ops';
//   2. h2d: host-to-device GB/s of stoker's pinned staging ring, of plain pageable copies, and of
//      torch-style pin-after (copy the whole batch into pinned memory, then copy it to the GPU);
//   3. train: a training loop whose step is a GPU kernel of fixed duration, fed batches of
//      256 x 224 x 224 images by a stoker pipeline: the fraction of GPU time spent waiting for
//      data.
//
//   stoker_gpu_check [--sections kernels,h2d,train] [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "spin_kernel.h"
#include "stoker/data/image.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/source.h"
#include "stoker/data/to_device.h"
#include "stoker/data/transform.h"
#include "stoker/data/transforms.h"
#include "stoker/gpu/batch_transform.h"
#include "stoker/gpu/device_batcher.h"
#include "stoker/gpu/transform_kernels.h"

namespace stoker::bench {
namespace {

using json = nlohmann::json;
using data::DType;
using data::Element;
using data::Tensor;
using Clock = std::chrono::steady_clock;

#define CHECK_CUDA(call)                                                                         \
  do {                                                                                           \
    cudaError_t e = (call);                                                                      \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

template <typename T>
T Must(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(v.status().message()).c_str());
    std::exit(2);
  }
  return *std::move(v);
}
void Must(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::exit(2);
  }
}

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

const std::vector<double> kMean = {0.485, 0.456, 0.406}, kStd = {0.229, 0.224, 0.225};

// `n` random uint8 images [h, w, 3] (noise: worst case for nothing, best for catching mistakes).
std::vector<Element> RandomImages(int n, int h, int w, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Element> out;
  for (int i = 0; i < n; ++i) {
    MutableBuffer b(size_t(h) * w * 3);
    for (size_t v = 0; v < b.size(); v += 4) {
      const uint32_t r = rng();
      std::memcpy(b.data() + v, &r, std::min<size_t>(4, b.size() - v));
    }
    Element e;
    e.keys = {"img/" + std::to_string(i)};
    e.sample_index = i;
    e.fields["img"] = Tensor{DType::kUint8, {h, w, 3}, std::move(b).Finish()};
    e.fields["label"] = Tensor::Scalar(i % 1000);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<Element> RunAll(const json& spec) {
  auto pipeline = Must(data::Pipeline::FromJson(spec), "pipeline");
  auto it = pipeline->MakeIterator(0);
  std::vector<Element> out;
  while (true) {
    auto e = Must(it->GetNext(), "GetNext");
    if (!e) break;
    out.push_back(std::move(*e));
  }
  return out;
}

std::vector<uint8_t> HostBytes(const Tensor& t) {
  if (t.device >= 0) return Must(data::CopyDeviceTensorToHost(t), "copy back");
  return {t.data.data(), t.data.data() + t.data.size()};
}

struct Comparison {
  bool exact = true;
  double max_diff = 0;
  size_t values = 0;
};

Comparison Compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType dtype) {
  Comparison c;
  c.exact = got == want;
  if (got.size() != want.size()) {
    c.exact = false;
    c.max_diff = INFINITY;
    return c;
  }
  if (dtype == DType::kFloat32) {
    c.values = want.size() / 4;
    for (size_t i = 0; i < c.values; ++i) {
      float g, w;
      std::memcpy(&g, &got[i * 4], 4);
      std::memcpy(&w, &want[i * 4], 4);
      c.max_diff = std::max(c.max_diff, double(std::fabs(g - w)));
    }
  } else {
    c.values = want.size();
    for (size_t i = 0; i < c.values; ++i) {
      c.max_diff = std::max(c.max_diff, std::fabs(double(got[i]) - double(want[i])));
    }
  }
  return c;
}

// --- 1. kernels --------------------------------------------------------------------------------

void KernelsSection(bool quick) {
  std::printf("## 1. The to_device kernel against the CPU ops\n\n");
  const int n = quick ? 16 : 64;
  data::RegisterMemoryDataset("gc_images", RandomImages(n, 256, 256, 1));
  const json source = {{"memory", "gc_images"}};
  struct Case {
    std::string name;
    json cpu_ops;
    json device_op;
    DType dtype;
  };
  const std::vector<Case> cases = {
      {"center crop 224 + horizontal flip, uint8 HWC",
       {{{"op", "center_crop"}, {"field", "img"}, {"size", 224}},
        {{"op", "flip"}, {"field", "img"}, {"p", 1.0}}},
       {{"op", "to_device"}, {"field", "img"}, {"crop", 224}, {"flip_p", 1.0}},
       DType::kUint8},
      {"center crop 224 + vertical flip, uint8 HWC",
       {{{"op", "center_crop"}, {"field", "img"}, {"size", 224}},
        {{"op", "flip"}, {"field", "img"}, {"p", 1.0}, {"direction", "vertical"}}},
       {{"op", "to_device"},
        {"field", "img"},
        {"crop", 224},
        {"flip_p", 1.0},
        {"flip_direction", "vertical"}},
       DType::kUint8},
      {"cast to float32 (no normalize), HWC",
       {{{"op", "cast"}, {"field", "img"}, {"to", "float32"}}},
       {{"op", "to_device"}, {"field", "img"}, {"dtype", "float32"}},
       DType::kFloat32},
      {"crop 224 + flip + normalize (ImageNet mean/std), float32 CHW",
       {{{"op", "center_crop"}, {"field", "img"}, {"size", 224}},
        {{"op", "flip"}, {"field", "img"}, {"p", 1.0}},
        {{"op", "normalize"}, {"field", "img"}, {"mean", kMean}, {"std", kStd}, {"layout", "CHW"}}},
       {{"op", "to_device"},
        {"field", "img"},
        {"crop", 224},
        {"flip_p", 1.0},
        {"mean", kMean},
        {"std", kStd},
        {"layout", "CHW"}},
       DType::kFloat32},
  };
  std::printf(
      "%d random 256x256 RGB images in batches of %d; CPU: the pipeline's ops then batch; "
      "device: batch then to_device (one fused kernel).\n\n",
      n, n / 2);
  std::printf("| transform | values compared | bit-identical | max abs difference | verdict |\n");
  std::printf("| --- | ---: | --- | ---: | --- |\n");
  bool all_ok = true;
  for (const Case& c : cases) {
    json cpu_ops = c.cpu_ops;
    cpu_ops.push_back({{"op", "batch"}, {"size", n / 2}});
    json device_ops = {{{"op", "batch"}, {"size", n / 2}}, c.device_op};
    auto want = RunAll({{"source", source}, {"ops", cpu_ops}});
    auto got = RunAll({{"source", source}, {"ops", device_ops}});
    Comparison total;
    for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
      Comparison one =
          Compare(HostBytes(got[i].fields.at("img")), HostBytes(want[i].fields.at("img")), c.dtype);
      total.exact = total.exact && one.exact;
      total.max_diff = std::max(total.max_diff, one.max_diff);
      total.values += one.values;
      if (got[i].fields.at("img").shape != want[i].fields.at("img").shape) total.exact = false;
      if (HostBytes(got[i].fields.at("label")) != HostBytes(want[i].fields.at("label")))
        total.exact = false;
    }
    if (want.size() != got.size() || want.empty()) total.exact = false;
    const bool ok = c.dtype == DType::kUint8 ? total.exact : total.max_diff <= 1e-6;
    all_ok = all_ok && ok;
    std::printf("| %s | %zu | %s | %.3g | %s |\n", c.name.c_str(), total.values,
                total.exact ? "yes" : "no", total.max_diff,
                ok ? (c.dtype == DType::kUint8 ? "pass (byte-exact)" : "pass (<= 1e-6)") : "FAIL");
  }

  // Random windows and flips per sample at full size: the kernel against the CPU reference (the
  // same per-pixel function), and its time against the pipeline's CPU normalize.
  const int batch = quick ? 64 : 256;
  gpu::TransformParams p;
  p.n = batch;
  p.in_h = p.in_w = 256;
  p.channels = 3;
  p.out_h = p.out_w = 224;
  p.out_chw = true;
  p.affine = true;
  for (int k = 0; k < 3; ++k)
    gpu::NormalizeCoefficients(kMean[k], kStd[k], 1.0 / 255, &p.scale[k], &p.shift[k]);
  std::mt19937 rng(5);
  std::vector<gpu::SampleParams> samples(batch);
  for (auto& s : samples) {
    s.y0 = rng() % 33;
    s.x0 = rng() % 33;
    s.flip = rng() % 2;
  }
  std::vector<uint8_t> in(size_t(batch) * 256 * 256 * 3);
  for (auto& b : in) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> want(p.OutputValues() * 4);
  auto t0 = Clock::now();
  gpu::TransformBatchOnCpu(p, samples.data(), gpu::ScalarType::kUint8, in.data(),
                           gpu::ScalarType::kFloat32, want.data());
  const double reference_s = Seconds(t0);
  void *d_in, *d_out, *d_samples;
  CHECK_CUDA(cudaMalloc(&d_in, in.size()));
  CHECK_CUDA(cudaMalloc(&d_out, want.size()));
  CHECK_CUDA(cudaMalloc(&d_samples, samples.size() * sizeof(gpu::SampleParams)));
  CHECK_CUDA(cudaMemcpy(d_in, in.data(), in.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_samples, samples.data(), samples.size() * sizeof(gpu::SampleParams),
                        cudaMemcpyHostToDevice));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> kernel_ms;
  for (int rep = 0; rep < 12; ++rep) {
    CHECK_CUDA(cudaEventRecord(start));
    CHECK_CUDA(gpu::LaunchTransform(p, static_cast<gpu::SampleParams*>(d_samples),
                                    gpu::ScalarType::kUint8, d_in, gpu::ScalarType::kFloat32, d_out,
                                    nullptr));
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep >= 2) kernel_ms.push_back(ms);
  }
  std::vector<uint8_t> got(want.size());
  CHECK_CUDA(cudaMemcpy(got.data(), d_out, got.size(), cudaMemcpyDeviceToHost));
  Comparison c = Compare(got, want, DType::kFloat32);
  all_ok = all_ok && c.max_diff <= 1e-6;
  CHECK_CUDA(cudaFree(d_in));
  CHECK_CUDA(cudaFree(d_out));
  CHECK_CUDA(cudaFree(d_samples));

  // The pipeline's own CPU ops on one thread, per batch: flip (every sample) + normalize to CHW.
  data::RegisterBuiltinOps();
  auto make = [](const json& spec) {
    data::ParamReader params(spec, "$", "op");
    params.String("op");
    auto t = Must((*data::FindTransform(spec["op"].get<std::string>()))(params), "transform");
    Must(params.Finish(), "params");
    return t;
  };
  auto flip = make({{"op", "flip"}, {"field", "img"}, {"p", 1.0}});
  auto normalize = make(
      {{"op", "normalize"}, {"field", "img"}, {"mean", kMean}, {"std", kStd}, {"layout", "CHW"}});
  auto crops = RandomImages(std::min(batch, 64), 224, 224, 9);
  data::Rng op_rng(1);
  t0 = Clock::now();
  for (auto& e : crops) {
    auto f = Must(flip->Apply(e, op_rng), "flip");
    Must(normalize->Apply(std::move(*f), op_rng), "normalize");
  }
  const double cpu_ops_s = Seconds(t0) * batch / crops.size();
  std::printf(
      "| random crop 224 of 256 + random flips + normalize, float32 CHW, batch %d: kernel "
      "vs CPU reference | %zu | %s | %.3g | %s |\n\n",
      batch, c.values, c.exact ? "yes" : "no", c.max_diff,
      c.max_diff <= 1e-6 ? "pass (<= 1e-6)" : "FAIL");
  std::printf(
      "Time per batch of %d (uint8 256x256 in, float32 3x224x224 out): fused kernel "
      "**%.3f ms** (median of 10); the pipeline's CPU flip + normalize ops %.1f ms on one "
      "core (%.1f ms on 16 cores if they scaled perfectly); the CPU reference (the kernel's "
      "per-pixel function, unvectorised) %.1f ms.\n\n",
      batch, Median(kernel_ms), cpu_ops_s * 1e3, cpu_ops_s * 1e3 / 16, reference_s * 1e3);
  std::printf("Kernels: **%s**.\n\n", all_ok ? "all pass" : "FAILURES above");
}

// --- 2. h2d ------------------------------------------------------------------------------------

struct HostBuffers {
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  HostBuffers(int count, size_t bytes) {
    for (int i = 0; i < count; ++i) {
      buffers.emplace_back(new uint8_t[bytes]);
      std::memset(buffers.back().get(), i + 1, bytes);  // touch every page
    }
  }
};

void H2dSection(bool quick) {
  std::printf("## 2. Host-to-device copies of one batch\n\n");
  std::printf(
      "Each figure: batches copied back to back (source: %s rotating pageable host buffers, "
      "as the pipeline's batches are), GB/s = bytes / wall time until the last copy "
      "completed; median of 3 runs.\n\n",
      "4");
  std::printf(
      "| batch | pinned source (PCIe ceiling) | **stoker pinned ring** | pageable "
      "cudaMemcpyAsync | torch-style pin-after |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: |\n");
  struct Size {
    const char* name;
    size_t bytes;
    int batches;
  };
  const std::vector<Size> sizes = {
      {"256x224x224x3 uint8 (38.5 MB)", size_t(256) * 224 * 224 * 3, quick ? 8 : 24},
      {"256x3x224x224 float32 (154 MB)", size_t(256) * 224 * 224 * 3 * 4, quick ? 4 : 8}};
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Size& size : sizes) {
    HostBuffers sources(4, size.bytes);
    void* device = nullptr;
    CHECK_CUDA(cudaMalloc(&device, size.bytes));
    void* pinned[2];
    cudaEvent_t pinned_done[2];
    for (int i = 0; i < 2; ++i) {
      CHECK_CUDA(cudaHostAlloc(&pinned[i], size.bytes, cudaHostAllocDefault));
      std::memset(pinned[i], 0, size.bytes);
      CHECK_CUDA(cudaEventCreateWithFlags(&pinned_done[i], cudaEventDisableTiming));
      CHECK_CUDA(cudaEventRecord(pinned_done[i], stream));
    }
    auto gbps = [&](auto&& run) {
      std::vector<double> runs;
      run(2);  // warm-up
      for (int rep = 0; rep < 3; ++rep) {
        auto t0 = Clock::now();
        run(size.batches);
        runs.push_back(double(size.bytes) * size.batches / Seconds(t0) / 1e9);
      }
      return Median(runs);
    };
    const double ceiling = gbps([&](int k) {
      for (int i = 0; i < k; ++i)
        CHECK_CUDA(
            cudaMemcpyAsync(device, pinned[i % 2], size.bytes, cudaMemcpyHostToDevice, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
    });
    auto batcher = Must(gpu::DeviceBatcher::Create({}), "DeviceBatcher");
    const double ring = gbps([&](int k) {
      gpu::DeviceArray last;
      for (int i = 0; i < k; ++i) {
        gpu::HostArray in{
            sources.buffers[i % 4].get(), gpu::ScalarType::kUint8, {int64_t(size.bytes)}};
        last = Must(batcher->Submit(in), "Submit");
      }
      Must(last.block->Synchronize(), "sync");
    });
    const double pageable = gbps([&](int k) {
      for (int i = 0; i < k; ++i)
        CHECK_CUDA(cudaMemcpyAsync(device, sources.buffers[i % 4].get(), size.bytes,
                                   cudaMemcpyHostToDevice, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
    });
    // torch's pin_memory() then .cuda(non_blocking=True): the whole batch is copied into a pinned
    // block from the caching host allocator (two blocks alternate; a block is reused once its copy
    // completed), then copied to the device asynchronously.
    const double pin_after = gbps([&](int k) {
      for (int i = 0; i < k; ++i) {
        CHECK_CUDA(cudaEventSynchronize(pinned_done[i % 2]));
        std::memcpy(pinned[i % 2], sources.buffers[i % 4].get(), size.bytes);
        CHECK_CUDA(
            cudaMemcpyAsync(device, pinned[i % 2], size.bytes, cudaMemcpyHostToDevice, stream));
        CHECK_CUDA(cudaEventRecord(pinned_done[i % 2], stream));
      }
      CHECK_CUDA(cudaStreamSynchronize(stream));
    });
    std::printf("| %s | %.1f GB/s | **%.1f GB/s** | %.1f GB/s | %.1f GB/s |\n", size.name, ceiling,
                ring, pageable, pin_after);
    for (int i = 0; i < 2; ++i) {
      CHECK_CUDA(cudaFreeHost(pinned[i]));
      CHECK_CUDA(cudaEventDestroy(pinned_done[i]));
    }
    CHECK_CUDA(cudaFree(device));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("\n");
}

// --- 3. train ----------------------------------------------------------------------------------

// A smooth 400x320 photo-like image as JPEG (about the size of an average ImageNet image).
std::vector<Element> JpegImages(int n) {
  std::vector<Element> out(n);
  std::vector<std::thread> threads;
  const int workers = std::max(1, int(std::thread::hardware_concurrency()));
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < n; i += workers) {
        std::mt19937 rng(i);
        const int h = 320, w = 400;
        MutableBuffer b(size_t(h) * w * 3);
        const int fx = 1 + rng() % 7, fy = 1 + rng() % 5;
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            for (int k = 0; k < 3; ++k)
              b.data()[(size_t(y) * w + x) * 3 + k] = static_cast<uint8_t>(
                  127 + 100 * std::sin((x * fx + y * fy + 40 * k) * 0.02) + int(rng() % 16));
        Tensor image{DType::kUint8, {h, w, 3}, std::move(b).Finish()};
        Element e;
        e.keys = {"jpg/" + std::to_string(i)};
        e.fields["jpg"] = Tensor::Bytes(Must(data::EncodeJpeg(image, 90), "encode"));
        e.fields["label"] = Tensor::Scalar(i % 1000);
        out[i] = std::move(e);
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

struct TrainResult {
  double wait_fraction = 0;
  double step_ms = 0;          // measured kernel time per step
  double batches_per_s = 0;    // steps per second of wall time
  double host_blocked_ms = 0;  // mean time the loop waited in GetNext
};

enum class Feed { kToDevice, kHostPageable };

// Runs `batches` training steps of `step_s` each, fed by `spec`; the first `warmup` are not
// counted. ahead: the host queues at most this many steps before waiting for the oldest.
TrainResult Train(const json& spec, Feed feed, const std::string& field, double step_s, int batches,
                  int warmup, int ahead) {
  auto pipeline = Must(data::Pipeline::FromJson(spec), "pipeline");
  auto it = pipeline->MakeIterator(0);
  cudaStream_t trainer;
  CHECK_CUDA(cudaStreamCreateWithFlags(&trainer, cudaStreamNonBlocking));
  uint64_t* sink;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&sink), 8));
  std::vector<cudaEvent_t> start(batches), end(batches);
  for (int i = 0; i < batches; ++i) {
    CHECK_CUDA(cudaEventCreate(&start[i]));
    CHECK_CUDA(cudaEventCreate(&end[i]));
  }
  void* device_batch[2] = {nullptr, nullptr};  // kHostPageable: where the copies land
  double blocked = 0;
  for (int i = 0; i < batches; ++i) {
    if (i >= ahead) CHECK_CUDA(cudaEventSynchronize(end[i - ahead]));
    auto t0 = Clock::now();
    auto e = Must(it->GetNext(), "GetNext");
    if (i >= warmup) blocked += Seconds(t0);
    if (!e) {
      std::fprintf(stderr, "the pipeline ended after %d batches\n", i);
      std::exit(2);
    }
    const Tensor& t = e->fields.at(field);
    const void* data = nullptr;
    if (feed == Feed::kToDevice) {
      Must(data::WaitForDeviceTensor(t, reinterpret_cast<int64_t>(trainer)), "wait");
      data = t.data.data();
    } else {
      void*& dst = device_batch[i % 2];
      if (dst == nullptr) CHECK_CUDA(cudaMalloc(&dst, t.data.size()));
      CHECK_CUDA(
          cudaMemcpyAsync(dst, t.data.data(), t.data.size(), cudaMemcpyHostToDevice, trainer));
      data = dst;
    }
    CHECK_CUDA(cudaEventRecord(start[i], trainer));
    CHECK_CUDA(LaunchTrainingStep(data, step_s, sink, trainer));
    CHECK_CUDA(cudaEventRecord(end[i], trainer));
  }
  CHECK_CUDA(cudaStreamSynchronize(trainer));
  TrainResult r;
  double busy = 0, window = 0;
  for (int i = warmup; i < batches; ++i) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start[i], end[i]));
    busy += ms;
  }
  float total = 0;
  CHECK_CUDA(cudaEventElapsedTime(&total, end[warmup - 1], end[batches - 1]));
  window = total;
  r.wait_fraction = std::max(0.0, 1.0 - busy / window);
  r.step_ms = busy / (batches - warmup);
  r.batches_per_s = (batches - warmup) / (window / 1e3);
  r.host_blocked_ms = blocked * 1e3 / (batches - warmup);
  for (int i = 0; i < batches; ++i) {
    cudaEventDestroy(start[i]);
    cudaEventDestroy(end[i]);
  }
  for (void* p : device_batch)
    if (p) cudaFree(p);
  cudaFree(sink);
  cudaStreamDestroy(trainer);
  return r;
}

void TrainSection(bool quick) {
  std::printf("## 3. A training loop fed by stoker: the fraction of time the GPU waits\n\n");
  const int batch = 256, batches = quick ? 12 : 40, warmup = 4;
  const unsigned cores = std::thread::hardware_concurrency();
  data::RegisterMemoryDataset("gc_decoded", RandomImages(2 * batch, 256, 256, 3));
  auto t0 = Clock::now();
  data::RegisterMemoryDataset("gc_jpeg", JpegImages(quick ? 256 : 1024));
  const double encode_s = Seconds(t0);
  const json normalize_on_device = {{"op", "to_device"}, {"field", "img"}, {"flip_p", 0.5},
                                    {"mean", kMean},     {"std", kStd},    {"layout", "CHW"}};
  json decoded_device = normalize_on_device;
  decoded_device["crop"] = 224;
  decoded_device["crop_position"] = "random";
  // Decoded 256x256 images in memory: the batch, the staging ring, the copy and the kernel only.
  const json decoded = {
      {"source", {{"memory", "gc_decoded"}}},
      {"ops", {{{"op", "repeat"}}, {{"op", "batch"}, {"size", batch}}, decoded_device}}};
  // JPEG decode + random_resized_crop on the CPU (every core), then uint8 batches to the device.
  json jpeg_ops = {{{"op", "repeat"}},
                   {{"op", "decode_image"}, {"field", "jpg"}},
                   {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", 224}},
                   {{"op", "batch"}, {"size", batch}}};
  json jpeg_device_op = normalize_on_device;
  jpeg_device_op["field"] = "jpg";
  json jpeg_device_ops = jpeg_ops;
  jpeg_device_ops.push_back(jpeg_device_op);
  const json jpeg_device = {{"source", {{"memory", "gc_jpeg"}}}, {"ops", jpeg_device_ops}};
  // The same on the CPU only: flip and normalize as CPU ops, float32 batches (4x the bytes) copied
  // from pageable memory by the trainer (a DataLoader without pin_memory).
  json cpu_ops = {
      {{"op", "repeat"}},
      {{"op", "decode_image"}, {"field", "jpg"}},
      {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", 224}},
      {{"op", "flip"}, {"field", "jpg"}, {"p", 0.5}},
      {{"op", "normalize"}, {"field", "jpg"}, {"mean", kMean}, {"std", kStd}, {"layout", "CHW"}},
      {{"op", "batch"}, {"size", batch}},
      {{"op", "prefetch"}, {"buffer", 2}}};
  const json jpeg_cpu = {{"source", {{"memory", "gc_jpeg"}}}, {"ops", cpu_ops}};

  std::printf(
      "Batches of %d images, 224x224. The step is a kernel that keeps the GPU busy for a "
      "fixed time; the trainer queues at most 2 steps ahead (like PyTorch between syncs) or "
      "synchronizes every step (`loss.item()` each step). GPU wait = 1 - (time in steps / "
      "wall time between the end of step %d and the end of the last step), from CUDA "
      "events; %d steps counted. %u CPU cores run the pipeline; JPEGs: 400x320, quality 90, "
      "in memory (made in %.1f s before the runs).\n\n",
      batch, warmup, batches - warmup, cores, encode_s);
  std::printf("| feed | step | trainer | GPU waits | steps/s | host blocked in next() |\n");
  std::printf("| --- | ---: | --- | ---: | ---: | ---: |\n");
  struct Run {
    const char* name;
    const json* spec;
    Feed feed;
    const char* field;
  };
  const std::vector<Run> runs = {
      {"decoded images → batch → **to_device** (random crop, flip, normalize, CHW on the GPU)",
       &decoded, Feed::kToDevice, "img"},
      {"JPEG decode + random_resized_crop (CPU) → uint8 batch → **to_device** (flip, normalize, "
       "CHW)",
       &jpeg_device, Feed::kToDevice, "jpg"},
      {"JPEG decode + random_resized_crop + flip + normalize (CPU) → float32 batch → pageable copy "
       "by the trainer",
       &jpeg_cpu, Feed::kHostPageable, "jpg"},
  };
  for (const Run& run : runs) {
    for (double step_ms : {20.0, 60.0}) {
      for (int ahead : {2, 1}) {
        TrainResult r =
            Train(*run.spec, run.feed, run.field, step_ms / 1e3, batches, warmup, ahead);
        std::printf("| %s | %.0f ms (measured %.1f) | %s | **%.1f%%** | %.1f | %.1f ms |\n",
                    run.name, step_ms, r.step_ms, ahead == 2 ? "2 steps ahead" : "sync each step",
                    100 * r.wait_fraction, r.batches_per_s, r.host_blocked_ms);
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n");
}

}  // namespace
}  // namespace stoker::bench

int main(int argc, char** argv) {
  using namespace stoker::bench;
  std::string sections = "kernels,h2d,train";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--sections" && i + 1 < argc) {
      sections = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--sections kernels,h2d,train] [--quick]\n", argv[0]);
      return 2;
    }
  }
  std::string why;
  if (stoker::gpu::CudaDeviceCount(&why) == 0) {
    std::fprintf(stderr, "stoker_gpu_check: no CUDA device (%s)\n", why.c_str());
    return 3;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("Device: %s (%d SMs, %.0f GiB), %u CPU cores%s.\n\n", prop.name,
              prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30),
              std::thread::hardware_concurrency(), quick ? ", --quick" : "");
  std::fflush(stdout);
  if (sections.find("kernels") != std::string::npos) KernelsSection(quick);
  std::fflush(stdout);
  if (sections.find("h2d") != std::string::npos) H2dSection(quick);
  std::fflush(stdout);
  if (sections.find("train") != std::string::npos) TrainSection(quick);
  return 0;
}
