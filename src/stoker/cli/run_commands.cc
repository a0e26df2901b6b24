// stoker run: runs a pipeline spec in-process and reports throughput (docs/pipeline.md).
#include <malloc.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "stoker/cli/commands.h"
#include "stoker/cli/progress.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"

namespace stoker::cli {
namespace {

struct RunOptions {
  std::string spec;
  int64_t epochs = 1;
  int64_t max_elements = -1;
  bool print_keys = false;
  bool digest = false;  // print a SHA-256 of everything delivered
  int threads = 0;
  std::string checkpoint;  // write a resume token here when stopping before the end
  std::string resume;      // start from the token in this file
  ProgressMode progress = ProgressMode::kAuto;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot open '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void KeepDataPathAllocationsOnHeap() {
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

namespace {

absl::Status Run(const RunOptions& o) {
  // Decoded images and normalized tensors are hundreds of KiB each (about 30% less CPU in
  // normalize with them on the heap, measured).
  KeepDataPathAllocationsOnHeap();
  ASSIGN_OR_RETURN(std::shared_ptr<const data::Pipeline> pipeline,
                   data::Pipeline::FromFile(o.spec));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int64_t elements = 0, samples = 0, bytes = 0;
  int64_t first_epoch = 0;
  std::string token;
  if (!o.resume.empty()) {
    ASSIGN_OR_RETURN(token, ReadFile(o.resume));
  }
  std::unique_ptr<data::PipelineIterator> it;
  std::vector<std::unique_ptr<data::PipelineIterator>> finished;  // kept for their stats
  bool stopped_early = false;
  ElementDigest digest;
  Progress progress("run", "elements", o.progress);
  if (std::optional<int64_t> per_epoch = pipeline->Cardinality()) {
    int64_t total = *per_epoch * o.epochs;
    progress.SetTotals(0, o.max_elements >= 0 ? std::min(total, o.max_elements) : total);
  } else if (o.max_elements >= 0) {
    progress.SetTotals(0, o.max_elements);
  }
  for (int64_t epoch = first_epoch; epoch < o.epochs; ++epoch) {
    it = pipeline->MakeIterator(epoch, o.threads);
    if (!token.empty()) {
      RETURN_IF_ERROR(Annotate(it->Restore(token), StrCat("resuming from ", o.resume)));
      epoch = it->epoch();
      token.clear();
      if (epoch >= o.epochs) break;
    }
    while (true) {
      if (o.max_elements >= 0 && elements >= o.max_elements) {
        stopped_early = true;
        break;
      }
      ASSIGN_OR_RETURN(std::optional<data::Element> e, it->GetNext());
      if (!e) break;
      ++elements;
      samples += static_cast<int64_t>(e->keys.size());
      bytes += static_cast<int64_t>(e->ByteSize());
      progress.Add(static_cast<int64_t>(e->ByteSize()), 1);
      if (o.print_keys) {
        for (const std::string& key : e->keys) std::printf("%s\n", key.c_str());
      }
      if (o.digest) digest.Add(*e);
    }
    if (stopped_early) break;
    finished.push_back(std::move(it));
  }
  if (o.digest) std::printf("sha256 %s\n", digest.Hex().c_str());
  std::fflush(stdout);
  progress.Finish();
  if (!o.checkpoint.empty()) {
    if (stopped_early && it) {
      ASSIGN_OR_RETURN(std::string saved, it->Save());
      std::ofstream out(o.checkpoint, std::ios::trunc);
      out << saved;
      if (!out)
        return absl::UnavailableError(StrCat("cannot write checkpoint '", o.checkpoint, "'"));
    } else {
      std::remove(o.checkpoint.c_str());  // nothing left to resume
    }
  }
  const double seconds =
      std::max(1e-9, std::chrono::duration<double>(Clock::now() - start).count());
  std::fprintf(stderr,
               "stoker run: %lld elements, %lld samples, %.1f MB in %.2f s: %.1f elements/s, "
               "%.1f samples/s, %.1f MB/s (pipeline %s, %d threads%s)\n",
               static_cast<long long>(elements), static_cast<long long>(samples), bytes / 1e6,
               seconds, elements / seconds, samples / seconds, bytes / 1e6 / seconds,
               pipeline->fingerprint().c_str(), o.threads > 0 ? o.threads : pipeline->threads(),
               pipeline->deterministic()
                   ? ""
                   : "; deterministic: false, so the order may differ from run to run");
  // Time per stage, summed over the epochs run.
  std::map<std::string, std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> stages;
  std::vector<std::string> order;
  if (it) finished.push_back(std::move(it));
  for (const auto& f : finished) {
    for (const data::StageStats* s : f->runtime().AllStats()) {
      if (!stages.count(s->name)) order.push_back(s->name);
      auto& [busy, n, b, skipped, par] = stages[s->name];
      busy += s->busy_ns;
      n += s->elements;
      b += s->bytes;
      skipped += s->skipped;
      par = s->parallelism;
    }
  }
  std::fprintf(stderr, "  %-48s %10s %12s %10s %8s\n", "stage", "cpu s", "elements", "MB",
               "skipped");
  for (const std::string& name : order) {
    auto& [busy, n, b, skipped, par] = stages[name];
    std::string label = par > 0 ? StrCat(name, " (parallelism ", par, ")") : name;
    std::fprintf(stderr, "  %-48s %10.3f %12lld %10.1f %8lld\n", label.c_str(), busy / 1e9,
                 static_cast<long long>(n), b / 1e6, static_cast<long long>(skipped));
  }
  if (std::optional<data::SourceCacheStats> cache = pipeline->source_cache_stats()) {
    std::fprintf(stderr,
                 "  block cache: %llu hits, %llu misses (blocks), %.1f MB read from the store "
                 "(cache %.1f MB)\n",
                 static_cast<unsigned long long>(cache->hits),
                 static_cast<unsigned long long>(cache->misses), cache->remote_bytes / 1e6,
                 cache->budget_bytes / 1e6);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterRunCommands(CLI::App& app, absl::Status* result) {
  auto* run = app.add_subcommand("run", "Run a pipeline spec in-process and report throughput");
  // Static, so the parsed options outlive parsing without a heap object the leak checker flags.
  static RunOptions options;
  RunOptions* o = &options;
  run->add_option("SPEC", o->spec, "pipeline spec (JSON file, see docs/pipeline.md)")->required();
  run->add_option("--epochs", o->epochs, "epochs to run (default 1)")->check(CLI::PositiveNumber);
  run->add_option("--max-elements", o->max_elements, "stop after this many elements");
  run->add_flag("--print-keys", o->print_keys,
                "print the key of every delivered sample, one a line, in delivery order");
  run->add_flag("--digest", o->digest,
                "print the SHA-256 of every delivered element (keys, field names, dtypes, shapes "
                "and bytes, in delivery order): equal digests, equal outputs");
  run->add_option("--threads", o->threads, "CPU pool size (default: the spec's, else all cores)");
  run->add_option("--checkpoint", o->checkpoint,
                  "when stopping at --max-elements, write a resume token to this file");
  run->add_option("--resume", o->resume, "continue from a token written by --checkpoint");
  AddProgressFlags(run, &o->progress);
  run->callback([=] { *result = Run(*o); });
}

struct ElementDigest::Context {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> sha{EVP_MD_CTX_new(), EVP_MD_CTX_free};
};

ElementDigest::ElementDigest() : ctx_(std::make_unique<Context>()) {
  EVP_DigestInit_ex(ctx_->sha.get(), EVP_sha256(), nullptr);
}

ElementDigest::~ElementDigest() = default;

void ElementDigest::Add(const data::Element& e) {
  auto add = [sha = ctx_->sha.get()](std::string_view bytes) {
    const uint64_t size = bytes.size();
    EVP_DigestUpdate(sha, &size, sizeof(size));
    EVP_DigestUpdate(sha, bytes.data(), bytes.size());
  };
  for (const std::string& key : e.keys) add(key);
  for (const auto& [name, t] : e.fields) {
    add(name);
    add(data::DTypeName(t.dtype));
    add(t.ShapeString());
    add(t.data.view());
  }
}

std::string ElementDigest::Hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx_->sha.get(), md, &length);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

}  // namespace stoker::cli
