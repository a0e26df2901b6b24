// stoker demo: the whole service on one machine in one process: generates JPEGs, converts them to
// shards with the format layer, starts a dispatcher and two workers on loopback, and consumes one
// augmented, batched epoch through a ServiceClient, checking that every image arrived exactly
// once.
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "stoker/cli/commands.h"
#include "stoker/cli/service_cli.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/image.h"
#include "stoker/format/convert.h"
#include "stoker/service/client/client.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"

namespace stoker::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct DemoOptions {
  int images = 2400;
  int batch = 8;
  std::string dir;
};

absl::Status MakeJpegs(const std::string& root, int count) {
  std::mt19937 rng(7);
  const char* classes[] = {"cat", "dog", "fox", "owl"};
  for (const char* c : classes) std::filesystem::create_directories(root + "/" + c);
  for (int i = 0; i < count; ++i) {
    int h = 96 + static_cast<int>(rng() % 64), w = 96 + static_cast<int>(rng() % 64);
    data::Tensor image;
    image.dtype = data::DType::kUint8;
    image.shape = {h, w, 3};
    MutableBuffer pixels(static_cast<size_t>(h) * w * 3);
    uint8_t base = static_cast<uint8_t>(rng());
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < 3; ++ch)
          pixels.data()[(y * w + x) * 3 + ch] = static_cast<uint8_t>(base + x * (ch + 1) + y * 2);
    image.data = std::move(pixels).Finish();
    ASSIGN_OR_RETURN(Buffer jpeg, data::EncodeJpeg(image, 85));
    std::string path = StrCat(root, "/", classes[i % 4], "/img", i, ".jpg");
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(jpeg.data()),
              static_cast<std::streamsize>(jpeg.size()));
    if (!out) return absl::InternalError(StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

void DrawProgress(int64_t done, int64_t total, double seconds) {
  const int width = 40;
  int filled = total > 0 ? static_cast<int>(width * done / total) : 0;
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  std::fprintf(stderr, "\r  [%s] %lld/%lld batches  %.0f batches/s", bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total),
               seconds > 0 ? done / seconds : 0.0);
  std::fflush(stderr);
}

absl::Status RunDemo(const DemoOptions& o) {
  KeepDataPathAllocationsOnHeap();
  std::string dir = o.dir;
  bool remove_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/stoker-demo-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("cannot create a temporary folder");
    dir = tmpl;
    remove_dir = true;
  }
  struct Cleanup {
    std::string dir;
    bool on;
    ~Cleanup() {
      std::error_code ec;
      if (on) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir, remove_dir};

  auto t0 = Clock::now();
  std::fprintf(stderr, "stoker demo: the disaggregated service on this machine, in %s\n",
               dir.c_str());
  std::fprintf(stderr, "1. generating %d JPEG images (4 classes) ...\n", o.images);
  RETURN_IF_ERROR(MakeJpegs(dir + "/images", o.images));
  std::fprintf(stderr, "2. converting them to shards with the format layer ...\n");
  format::ConvertOptions convert_options;
  convert_options.shard_bytes = 4 << 20;
  ASSIGN_OR_RETURN(auto summary,
                   format::Convert(dir + "/images", dir + "/shards", convert_options));
  std::fprintf(stderr, "   %zu files -> %s\n", summary.inputs, summary.manifest_url.c_str());

  std::fprintf(stderr,
               "3. starting a dispatcher and 2 workers (in this process, on loopback) ...\n");
  // Loopback only: the demo serves this host (no other host could reach it, so no plaintext
  // warning either).
  service::DispatcherOptions dopts;
  dopts.bind_address = "127.0.0.1";
  dopts.work_dir = dir + "/dispatcher";
  ASSIGN_OR_RETURN(auto dispatcher, service::Dispatcher::Start(dopts));
  std::string address = StrCat("127.0.0.1:", dispatcher->port());
  std::vector<std::unique_ptr<service::Worker>> workers;
  for (int i = 0; i < 2; ++i) {
    service::WorkerOptions wopts;
    wopts.dispatcher_address = address;
    wopts.bind_address = "127.0.0.1";
    wopts.heartbeat_interval = std::chrono::milliseconds(100);
    wopts.threads = 1;
    ASSIGN_OR_RETURN(auto w, service::Worker::Start(wopts));
    workers.push_back(std::move(w));
  }
  nlohmann::json spec = {{"source", {{"dataset", dir + "/shards"}}},
                         {"ops",
                          {{{"op", "shuffle"}, {"seed", 7}},
                           {{"op", "decode_image"}, {"field", "jpg"}},
                           {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", {64, 64}}},
                           {{"op", "flip"}, {"field", "jpg"}, {"p", 0.5}},
                           {{"op", "normalize"},
                            {"field", "jpg"},
                            {"mean", {0.485, 0.456, 0.406}},
                            {"std", {0.229, 0.224, 0.225}}},
                           {{"op", "batch"}, {"size", o.batch}}}}};
  std::fprintf(stderr,
               "4. consuming one epoch through the service (decode, crop 64x64, flip, "
               "normalize, batch %d):\n",
               o.batch);
  service::ServiceClientOptions copts;
  copts.dispatcher_address = address;
  copts.display_name = service::DefaultDisplayName("stoker demo");
  copts.heartbeat_interval = std::chrono::milliseconds(100);
  auto start = Clock::now();
  ASSIGN_OR_RETURN(auto client, service::ServiceClient::Open(copts, spec.dump()));
  int64_t total_batches = (o.images + o.batch - 1) / o.batch;
  int64_t batches = 0, images = 0;
  std::set<std::string> keys;
  auto last_draw = Clock::now();
  while (true) {
    ASSIGN_OR_RETURN(std::optional<data::Element> e, client->GetNext());
    if (!e) break;
    ++batches;
    images += static_cast<int64_t>(e->keys.size());
    keys.insert(e->keys.begin(), e->keys.end());
    if (Clock::now() - last_draw > std::chrono::milliseconds(100)) {
      DrawProgress(batches, total_batches, Seconds(start));
      last_draw = Clock::now();
    }
  }
  double seconds = Seconds(start);
  DrawProgress(batches, total_batches, seconds);
  std::fprintf(stderr, "\n");
  auto stats = client->stats();
  std::printf(
      "stoker demo: %lld images in %lld batches through 1 dispatcher + 2 workers in %.2f s\n",
      static_cast<long long>(images), static_cast<long long>(batches), seconds);
  std::printf("  %.0f images/s, %.1f MB/s of ready tensors (float32 64x64x3)\n", images / seconds,
              stats.bytes / 1e6 / seconds);
  std::printf("  every image exactly once: %s (%zu distinct of %d); %lld splits acknowledged\n",
              keys.size() == static_cast<size_t>(o.images) && images == o.images ? "yes" : "NO",
              keys.size(), o.images, static_cast<long long>(stats.splits));
  std::printf("  total %.1f s including data generation and conversion\n", Seconds(t0));
  if (images != o.images || keys.size() != static_cast<size_t>(o.images))
    return absl::InternalError("the demo did not deliver every image exactly once");
  return absl::OkStatus();
}

}  // namespace

void RegisterDemoCommand(CLI::App& app, absl::Status* result) {
  // Static, so the parsed options outlive parsing without a heap object the leak checker flags.
  static DemoOptions demo_options;
  auto* m = app.add_subcommand(
      "demo", "Generate JPEGs, convert them to shards and consume them through a local service");
  m->add_option("--images", demo_options.images, "images to generate (default 2400)");
  m->add_option("--batch", demo_options.batch, "batch size (default 8)");
  m->add_option("--dir", demo_options.dir,
                "keep the data in this folder (default: a temporary one)");
  m->callback([=] { *result = RunDemo(demo_options); });
}

}  // namespace stoker::cli
