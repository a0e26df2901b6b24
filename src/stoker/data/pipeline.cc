#include "stoker/data/pipeline.h"

#include <dlfcn.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/image_fusion.h"
#include "stoker/data/mix_source.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/ops.h"
#include "stoker/data/snapshot.h"
#include "stoker/data/source.h"
#include "stoker/data/sources_format.h"
#include "stoker/data/transforms.h"

namespace stoker::data {

using json = nlohmann::json;

namespace {

std::string HexDigest(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < 16 && i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

// Where `path` really is (symbolic links resolved), or "" when it does not exist.
std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return "";
  return resolved;
}

// Checks `plugin` against `policy` before anything of it is loaded (dlopen runs its code).
absl::Status CheckPlugin(const std::string& plugin, const PluginPolicy& policy,
                         const std::string& where) {
  if (policy.anywhere) return absl::OkStatus();
  std::string dirs;
  for (const std::string& d : policy.dirs) dirs += StrCat(dirs.empty() ? "" : ", ", d);
  const std::string real = RealPath(plugin);
  if (!real.empty()) {
    for (const std::string& dir : policy.dirs) {
      const std::string real_dir = RealPath(dir);
      if (!real_dir.empty() && real.starts_with(real_dir + "/")) return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(
      StrCat(where, ": plugin '", plugin,
             "' is refused: this worker loads plugins only from the folders "
             "its operator named with --plugin-dir (",
             dirs.empty() ? "none, so no plugin at all" : dirs,
             "). Ask the operator to install the library in such a folder, or run the pipeline in "
             "process"));
}

absl::Status LoadPlugins(ParamReader& top, const PluginPolicy& policy) {
  std::vector<std::string> plugins = top.StringList("plugins", std::vector<std::string>{});
  for (size_t i = 0; i < plugins.size(); ++i) {
    const std::string where = IndexPath(top.PathOf("plugins"), i);
    RETURN_IF_ERROR(CheckPlugin(plugins[i], policy, where));
    // Never closed: transforms made by the plugin may live as long as the process. Under a
    // policy, the checked real path is what is loaded (no search path, no swapped link).
    const std::string load = policy.anywhere ? plugins[i] : RealPath(plugins[i]);
    void* handle = dlopen(load.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      return absl::InvalidArgumentError(StrCat(
          where, ": cannot load plugin '", plugins[i], "': ", error ? error : "unknown error",
          " (give a path to a shared library built against this stoker)"));
    }
  }
  return absl::OkStatus();
}

std::string Allowed() {
  std::string out;
  for (const auto& n : RegisteredOpNames()) out += StrCat(out.empty() ? "" : ", ", n);
  return out;
}

}  // namespace

// The fusion pass, over the spec before anything is built: which ops each decode_image takes
// into one fused step, by the ops' `fusable` trait (op_registry.h) and their order on one field:
//  - random_resized_crop right after it: decoded at a reduced DCT scale, only the crop's region
//    (always: that is how the two ops are defined together);
//  - then flips and a normalize: flipped, converted and laid out in one pass, written straight
//    into the batch buffer (MakeImageChain), unless the spec says "fuse_image_ops": false.
// Each op keeps its own random stream, so the output is the same bytes either way.
std::map<size_t, ImageChainPlan> PlanImageChains(const json& ops, bool fuse_image_ops) {
  std::map<size_t, ImageChainPlan> chains;
  if (!ops.is_array()) return chains;
  auto name_of = [&](size_t j) -> std::string {
    return j < ops.size() && ops[j].is_object() && ops[j].contains("op") && ops[j]["op"].is_string()
               ? ops[j]["op"].get<std::string>()
               : std::string();
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    if (name_of(i) != "decode_image") continue;
    const json field = ops[i].value("field", json());
    // ops[j] is the fusable op `name` on the same field.
    auto joins = [&](size_t j, const char* name) {
      if (name_of(j) != name || ops[j].value("field", json()) != field) return false;
      const OpDefinition* def = FindOp(name);
      return def != nullptr && def->traits.fusable;
    };
    ImageChainPlan plan{.decode = i};
    size_t j = i + 1;
    if (joins(j, "random_resized_crop")) plan.crop = j++;
    if (fuse_image_ops) {
      while (joins(j, "flip")) plan.flips.push_back(j++);
      if (joins(j, "normalize")) plan.normalize = j++;
    }
    chains.emplace(i, plan);
    i = plan.last();
  }
  return chains;
}

struct PipelineBuilder {
  uint64_t seed = 0;
  // The source, not yet a node: the first op may turn into the source's own shuffle.
  std::shared_ptr<IndexedSource> indexed;
  std::shared_ptr<StreamSource> stream;
  NodePtr node;
  std::vector<MapStep> steps;
  int parallelism = 0;
  int read_ahead = 0;  // the source's reads in flight (0: autotuned)
  int64_t memory_budget_bytes = 0;

  absl::Status ParseSource(const json& spec) {
    if (!spec.contains("source")) {
      return absl::InvalidArgumentError(
          "$.source: missing required field; expected an object with one of \"dataset\", "
          "\"tfrecord\", \"tar\", \"range\", \"memory\"");
    }
    ParamReader p(spec["source"], "$.source", "the source");
    if (p.Has("mix")) return ParseMix(spec["source"]);
    int kinds = 0;
    for (const char* k : {"dataset", "tfrecord", "tar", "range", "memory"}) kinds += p.Has(k);
    if (kinds != 1 && spec["source"].is_object()) {
      return absl::InvalidArgumentError(StrCat(
          "$.source: expected exactly one of \"dataset\" (a dataset URL), \"tfrecord\" or "
          "\"tar\" (arrays of URLs), \"range\" (a count), \"memory\" (a registered name); got ",
          kinds));
    }
    if (p.Has("range")) {
      indexed = MakeRangeSource(p.Int("range", std::nullopt, 0));
    } else if (p.Has("memory")) {
      std::string name = p.String("memory");
      int64_t shards = p.Int("shards", 0, 0, 1 << 20);
      RETURN_IF_ERROR(p.Finish());
      if (shards > 0) {
        stream = MakeMemoryStreamSource(name, static_cast<int>(shards));
      } else {
        indexed = FindMemoryDataset(name);
      }
      if (!indexed && !stream) {
        return absl::NotFoundError(StrCat("$.source.memory: no in-memory dataset named '", name,
                                          "' is registered in this process"));
      }
    } else if (p.Has("dataset")) {
      std::string url = p.String("dataset");
      DatasetSourceOptions options;
      options.skip_corrupt = p.String("on_corrupt", "fail", {"fail", "skip"}) == "skip";
      options.direct_io = p.String("direct_io", "auto", {"auto", "on", "off"});
      options.cache = p.String("cache", "auto", {"auto", "on", "off"});
      options.cache_bytes = p.Int("cache_mb", 0, 0, int64_t{1} << 30) << 20;
      read_ahead = static_cast<int>(p.Int("read_ahead", 0, 0, 64));
      // A snapshot still being written (snapshot.h): read as one stream that waits for its parts.
      const bool wait = p.Bool("wait", false);
      const double wait_timeout_s = p.Number("wait_timeout_s", 600, 0.1, 1e7);
      RETURN_IF_ERROR(p.Finish());
      if (wait) {
        auto waiting = OpenSnapshotStream(
            url, std::chrono::milliseconds(static_cast<int64_t>(wait_timeout_s * 1000)),
            options.skip_corrupt);
        if (!waiting.ok()) return Annotate(waiting.status(), "$.source.dataset");
        stream = *waiting;
        return absl::OkStatus();
      }
      auto opened = OpenFormatDataset(url, options);
      if (!opened.ok()) return Annotate(opened.status(), "$.source.dataset");
      indexed = *opened;
    } else if (p.Has("tfrecord") || p.Has("tar")) {
      bool tar = p.Has("tar");
      std::vector<std::string> urls = p.StringList(tar ? "tar" : "tfrecord", std::nullopt);
      bool skip = p.String("on_corrupt", "fail", {"fail", "skip"}) == "skip";
      read_ahead = static_cast<int>(p.Int("read_ahead", 0, 0, 64));
      RETURN_IF_ERROR(p.Finish());
      if (urls.empty()) {
        return absl::InvalidArgumentError(
            StrCat("$.source.", tar ? "tar" : "tfrecord", ": expected at least one URL"));
      }
      // Autotuned: up to 8 chunks of 8 MiB, within a quarter of the memory budget.
      int chunks =
          read_ahead > 0
              ? read_ahead
              : static_cast<int>(std::clamp<int64_t>(memory_budget_bytes / 4 / (8 << 20), 1, 8));
      auto opened = OpenFormatStream(urls, tar, skip, chunks);
      if (!opened.ok())
        return Annotate(opened.status(), StrCat("$.source.", tar ? "tar" : "tfrecord"));
      stream = *opened;
    }
    return p.Finish();
  }

  // {"mix": [{SOURCE, "weight" | "repeat" | "choose": ...}, ...], "epoch_size": N,
  // "stratified": bool}: a weighted mix of indexed sources (mix_source.h).
  absl::Status ParseMix(const json& source) {
    ParamReader p(source, "$.source", "the source");
    const json* mix = p.Raw("mix");
    std::optional<int64_t> epoch_size;
    if (p.Has("epoch_size")) epoch_size = p.Int("epoch_size", std::nullopt, 1, int64_t{1} << 50);
    const bool stratified = p.Bool("stratified", false);
    RETURN_IF_ERROR(p.Finish());
    if (mix == nullptr || !mix->is_array() || mix->empty())
      return absl::InvalidArgumentError(
          "$.source.mix: expected an array of streams, e.g. [{\"dataset\": URL, \"weight\": "
          "0.7}, {\"dataset\": URL, \"weight\": 0.3}]");
    std::vector<MixStream> streams;
    for (size_t i = 0; i < mix->size(); ++i) {
      const std::string at = IndexPath("$.source.mix", i);
      const json& entry = (*mix)[i];
      if (!entry.is_object())
        return absl::InvalidArgumentError(StrCat(at,
                                                 ": expected an object {SOURCE, \"weight\": "
                                                 "w} (or \"repeat\": r, \"choose\": n)"));
      const int given =
          entry.contains("weight") + entry.contains("repeat") + entry.contains("choose");
      if (given != 1)
        return absl::InvalidArgumentError(StrCat(
            at, ": give exactly one of \"weight\", \"repeat\" or \"choose\" (got ", given, ")"));
      MixStream stream;
      json quota = json::object(), inner = entry;
      for (const char* k : {"weight", "repeat", "choose"}) {
        if (entry.contains(k)) quota[k] = entry[k];
        inner.erase(k);
      }
      ParamReader e(quota, at, "a mix stream");
      if (quota.contains("weight")) stream.weight = e.Number("weight");
      if (quota.contains("repeat")) stream.repeat = e.Number("repeat");
      if (quota.contains("choose")) stream.choose = e.Int("choose", std::nullopt, 0);
      RETURN_IF_ERROR(e.Finish());
      if (inner.contains("mix"))
        return absl::InvalidArgumentError(StrCat(at, ": a mix cannot hold another mix"));
      PipelineBuilder sub;
      sub.memory_budget_bytes = memory_budget_bytes;
      absl::Status s = sub.ParseSource(json{{"source", inner}});
      if (!s.ok()) return Annotate(s, at);
      if (!sub.indexed)
        return absl::InvalidArgumentError(
            StrCat(at, ": a mix needs indexed sources (dataset, range, memory), not a stream"));
      stream.source = sub.indexed;
      streams.push_back(std::move(stream));
    }
    MixOptions options;
    options.epoch_size = epoch_size;
    options.stratified = stratified;
    options.seed = seed;
    ASSIGN_OR_RETURN(indexed, MixSource::Create(std::move(streams), options));
    return absl::OkStatus();
  }

  void MaterializeSource(std::optional<uint64_t> shuffle_seed, bool reshuffle) {
    if (node) return;
    node = indexed ? MakeIndexedSourceNode(indexed, shuffle_seed, reshuffle, read_ahead)
                   : MakeStreamSourceNode(stream, shuffle_seed);
  }

  // batch_size: the batch that takes the map's output directly, if any (its outputs may then be
  // written straight into the batch buffer).
  void FlushSteps(int64_t batch_size = 0) {
    MaterializeSource(std::nullopt, true);
    if (steps.empty()) return;
    node = MakeMapNode(node, std::move(steps), parallelism, batch_size);
    steps.clear();
    parallelism = 0;
  }

  // Builds the fused chain `plan` (from PlanImageChains) into `step`; `p` reads decode_image's
  // parameters. Every op of the chain reads and checks its own parameters.
  absl::Status BuildImageChain(const json& ops, const ImageChainPlan& plan, ParamReader& p,
                               MapStep& step) {
    std::vector<std::string> names{"decode_image"};
    std::vector<std::unique_ptr<ParamReader>> readers;  // of the ops after decode_image
    auto take = [&](size_t j) {
      const std::string name = ops[j]["op"].get<std::string>();
      readers.push_back(
          std::make_unique<ParamReader>(ops[j], IndexPath("$.ops", j), StrCat("op '", name, "'")));
      ParamReader& r = *readers.back();
      r.String("op");
      parallelism = std::max<int>(parallelism, static_cast<int>(r.Int("parallelism", 0, 0, 1024)));
      names.push_back(name);
      return &r;
    };
    ParamReader* crop = nullptr;
    uint64_t decode_seed = MixSeed({seed, plan.decode});
    if (plan.crop) {
      crop = take(*plan.crop);
      decode_seed = MixSeed({seed, *plan.crop});
    }
    std::vector<std::pair<ParamReader*, uint64_t>> flips;
    for (size_t j : plan.flips) flips.emplace_back(take(j), MixSeed({seed, j}));
    ParamReader* normalize = plan.normalize ? take(*plan.normalize) : nullptr;
    if (flips.empty() && normalize == nullptr) {
      if (crop != nullptr) {
        ASSIGN_OR_RETURN(step.transform, MakeDecodeRandomResizedCrop(p, *crop));
      } else {
        ASSIGN_OR_RETURN(step.transform, (*FindTransform("decode_image"))(p));
      }
    } else {
      ASSIGN_OR_RETURN(step.transform, MakeImageChain(p, crop, decode_seed, flips, normalize));
    }
    RETURN_IF_ERROR(p.Finish());
    for (auto& r : readers) RETURN_IF_ERROR(r->Finish());
    step.seed = decode_seed;
    if (plan.last() > plan.decode) {
      std::string joined;
      for (const std::string& n : names) joined += StrCat(joined.empty() ? "" : "+", n);
      step.name = StrCat("ops[", plan.decode, "-", plan.last(), "].", joined);
    }
    return absl::OkStatus();
  }

  // Builds the graph from the checked ops and the fusion pass's plan.
  absl::Status BuildOps(const json& ops, const std::map<size_t, ImageChainPlan>& chains) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string path = IndexPath("$.ops", i);
      const json& op = ops[i];
      if (!op.is_object() || !op.contains("op") || !op["op"].is_string()) {
        return absl::InvalidArgumentError(
            StrCat(path,
                   op.is_object() ? ".op: missing or not a string; expected one of "
                                  : ": expected an object {\"op\": NAME, ...}; NAME one of ",
                   Allowed()));
      }
      const std::string name = op["op"].get<std::string>();
      ParamReader p(op, path, StrCat("op '", name, "'"));
      p.String("op");
      const uint64_t op_seed = MixSeed({seed, i});
      const OpDefinition* def = FindOp(name);
      if (def != nullptr && def->dataset) {
        OpContext context;
        context.name = name;
        context.index = i;
        context.last = i + 1 == ops.size();
        context.pipeline_seed = seed;
        const json* size = name == "batch" && op.contains("size") ? &op["size"] : nullptr;
        const int64_t batch_size =
            size != nullptr && size->is_number_integer() ? size->get<int64_t>() : 0;
        context.input = [this, batch_size] {
          FlushSteps(batch_size);
          return node;
        };
        context.at_source = !node && steps.empty();
        context.stream_source = stream != nullptr;
        context.source = [this](std::optional<uint64_t> shuffle_seed, bool reshuffle) {
          MaterializeSource(shuffle_seed, reshuffle);
          return node;
        };
        ASSIGN_OR_RETURN(NodePtr next, def->dataset(p, context));
        RETURN_IF_ERROR(p.Finish());
        node = std::move(next);
      } else if (def != nullptr) {
        const TransformFactory* factory = &def->transform;
        int64_t par = p.Int("parallelism", 0, 0, 1024);
        parallelism = std::max<int>(parallelism, static_cast<int>(par));
        MapStep step{StrCat("ops[", i, "].", name), nullptr, op_seed};
        if (auto chain = chains.find(i); chain != chains.end()) {
          RETURN_IF_ERROR(BuildImageChain(ops, chain->second, p, step));
          i = chain->second.last();
        } else {
          ASSIGN_OR_RETURN(auto t, (*factory)(p));
          RETURN_IF_ERROR(p.Finish());
          step.transform = std::move(t);
        }
        if (!node && steps.empty()) MaterializeSource(std::nullopt, true);
        steps.push_back(std::move(step));
      } else {
        return absl::InvalidArgumentError(
            StrCat(path, ".op: unknown op '", name, "'; allowed: ", Allowed(),
                   " (or an op from a plugin listed in \"plugins\")"));
      }
    }
    FlushSteps();
    return absl::OkStatus();
  }
};

absl::StatusOr<std::shared_ptr<const Pipeline>> Pipeline::FromJson(const json& spec,
                                                                   const PluginPolicy& plugins) {
  RegisterBuiltinOps();
  ParamReader top(spec, "$", "the pipeline spec");
  // Plugins first: their ops may appear in "ops".
  RETURN_IF_ERROR(LoadPlugins(top, plugins));
  std::shared_ptr<Pipeline> pipeline(new Pipeline);
  PipelineBuilder b;
  b.seed = static_cast<uint64_t>(top.Int("seed", 0, 0));
  pipeline->deterministic_ = top.Bool("deterministic", true);
  const bool fuse_image_ops = top.Bool("fuse_image_ops", true);
  int64_t threads = top.Int("threads", 0, 0, 1024);
  pipeline->memory_budget_bytes_ = top.Int("memory_budget_mb", 1024, 1, 1 << 24) << 20;
  top.Raw("source");
  const json* ops = top.Raw("ops");
  RETURN_IF_ERROR(top.Finish());
  if (ops != nullptr && !ops->is_array()) {
    return absl::InvalidArgumentError(
        StrCat("$.ops: expected an array of op objects, got ", ops->type_name()));
  }
  b.memory_budget_bytes = pipeline->memory_budget_bytes_;
  // Three steps: the source, the fusion pass over the ops (a plan, nothing built), the graph.
  RETURN_IF_ERROR(b.ParseSource(spec));
  const json no_ops = json::array();
  const json& op_list = ops ? *ops : no_ops;
  RETURN_IF_ERROR(b.BuildOps(op_list, PlanImageChains(op_list, fuse_image_ops)));
  pipeline->root_ = b.node;
  if (b.indexed) pipeline->source_size_ = b.indexed->size();
  pipeline->indexed_source_ = b.indexed;
  pipeline->threads_ = threads > 0
                           ? static_cast<int>(threads)
                           : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  pipeline->spec_ = spec;
  pipeline->fingerprint_ = Fingerprint(spec);
  return std::shared_ptr<const Pipeline>(std::move(pipeline));
}

std::optional<SourceCacheStats> Pipeline::source_cache_stats() const {
  return indexed_source_ ? indexed_source_->cache_stats() : std::nullopt;
}

std::string Pipeline::Fingerprint(const json& spec) {
  json canonical = spec;
  // Threads and fusion change how the work is done, not what comes out.
  if (canonical.is_object()) {
    canonical.erase("threads");
    canonical.erase("fuse_image_ops");
  }
  // Read-ahead and caching change when and from where bytes are fetched, not what comes out.
  if (canonical.is_object() && canonical.contains("source") && canonical["source"].is_object()) {
    for (const char* key : {"read_ahead", "cache", "cache_mb"}) canonical["source"].erase(key);
  }
  return HexDigest(canonical.dump(-1, ' ', false, json::error_handler_t::replace));
}

absl::StatusOr<std::shared_ptr<const Pipeline>> Pipeline::FromString(std::string_view text,
                                                                     const PluginPolicy& plugins) {
  json spec = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded()) {
    // Find the byte offset of the syntax error for the message.
    try {
      json unused = json::parse(text.begin(), text.end());
      (void)unused;
    } catch (const json::parse_error& e) {
      return absl::InvalidArgumentError(
          StrCat("$: the spec is not valid JSON (at byte ", e.byte, ")"));
    } catch (const json::exception& e) {  // e.g. a number too large
      return absl::InvalidArgumentError(StrCat("$: the spec is not valid JSON (", e.what(), ")"));
    }
    return absl::InvalidArgumentError("$: the spec is not valid JSON");
  }
  return FromJson(spec, plugins);
}

absl::StatusOr<std::shared_ptr<const Pipeline>> Pipeline::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot open pipeline spec '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  auto pipeline = FromString(text.str());
  if (!pipeline.ok()) return Annotate(pipeline.status(), path);
  return pipeline;
}

std::unique_ptr<PipelineIterator> Pipeline::MakeIterator(int64_t epoch, int threads,
                                                         SplitProvider* splits) const {
  return std::make_unique<PipelineIterator>(shared_from_this(), epoch,
                                            threads > 0 ? threads : threads_, splits);
}

PipelineIterator::PipelineIterator(std::shared_ptr<const Pipeline> pipeline, int64_t epoch,
                                   int threads, SplitProvider* splits)
    : pipeline_(std::move(pipeline)),
      epoch_(epoch),
      splits_(splits),
      runtime_(std::make_unique<Runtime>(threads, pipeline_->deterministic_,
                                         pipeline_->memory_budget_bytes_)) {
  root_ = pipeline_->root_->MakeIterator(IteratorContext{runtime_.get(), epoch_, splits_});
}

PipelineIterator::~PipelineIterator() {
  root_.reset();  // stops producers and drains pool work before the runtime goes
}

absl::StatusOr<std::optional<Element>> PipelineIterator::GetNext() { return root_->GetNext(); }

absl::StatusOr<std::string> PipelineIterator::Save() {
  ASSIGN_OR_RETURN(json state, root_->Save());
  json token = {{"stoker_iterator", 1},
                {"fingerprint", pipeline_->fingerprint()},
                {"epoch", epoch_},
                {"state", std::move(state)}};
  return token.dump();
}

absl::Status PipelineIterator::Restore(std::string_view text) {
  json token = json::parse(text.begin(), text.end(), nullptr, false);
  if (token.is_discarded() || !token.is_object() || !token.contains("stoker_iterator") ||
      !token["fingerprint"].is_string() || !token["epoch"].is_number_integer() ||
      !token.contains("state")) {
    return absl::InvalidArgumentError("not an iterator token saved by stoker");
  }
  if (token["fingerprint"] != pipeline_->fingerprint()) {
    return absl::InvalidArgumentError(
        StrCat("iterator token was saved by a different pipeline (fingerprint ",
               token["fingerprint"].get<std::string>(), ", this pipeline ",
               pipeline_->fingerprint(), "); resume with the same spec"));
  }
  root_.reset();
  epoch_ = token["epoch"].get<int64_t>();
  root_ = pipeline_->root_->MakeIterator(IteratorContext{runtime_.get(), epoch_, splits_});
  return root_->Restore(token["state"]);
}

}  // namespace stoker::data
