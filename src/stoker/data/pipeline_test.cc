// The pipeline as a value (spec validation, fingerprint), plugins, reproducibility across thread
// counts, and resuming from a checkpoint in a new process.
#include "stoker/data/pipeline.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "stoker/data/image.h"
#include "stoker/data/source.h"
#include "stoker/data/test_util.h"

extern char** environ;

namespace stoker::data {
namespace {

using json = nlohmann::json;
using testing::Keys;
using testing::RunAll;

std::string ErrorOf(const json& spec) {
  auto p = Pipeline::FromJson(spec);
  return p.ok() ? "OK" : std::string(p.status().message());
}

TEST(Spec, ErrorsNameThePathTypeAndAllowedValues) {
  json base = {{"source", {{"range", 4}}}};
  struct Case {
    json ops;
    std::string want;
  } cases[] = {
      {{{{"op", "batch"}, {"size", 0}}}, "$.ops[0].size: expected an integer in [1, "},
      {{{{"op", "shuffle"}}, {{"op", "batch"}, {"size", "x"}}}, "$.ops[1].size: expected"},
      {{{{"op", "frobnicate"}}}, "$.ops[0].op: unknown op 'frobnicate'; allowed: shuffle"},
      {{{{"op", "resize"}, {"field", "jpg"}}}, "$.ops[0].size: resize needs exactly one of"},
      {{{{"op", "resize"}, {"field", "jpg"}, {"size", 3}, {"colour", 1}}},
       "$.ops[0].colour: unknown field for op 'resize'"},
      {{{{"op", "normalize"}, {"field", "jpg"}, {"layout", "NHWC"}}},
       "$.ops[0].layout: expected one of \"HWC\", \"CHW\""},
      {{{{"op", "cast"}, {"field", "x"}, {"to", "float64"}}}, "$.ops[0].to: expected one of"},
      {{{{"op", "flip"}, {"field", "x"}, {"p", 2}}}, "$.ops[0].p: expected a number in [0, 1]"},
      {{{{"op", "random_resized_crop"}, {"field", "x"}, {"size", 8}, {"scale", {0.9, 0.1}}}},
       "$.ops[0].scale: expected [min, max]"},
      {{{{"op", "bucket_by_length"},
         {"field", "x"},
         {"boundaries", {2, 4}},
         {"batch_sizes", {1, 2}}}},
       "$.ops[0].batch_sizes: expected 3 batch sizes"},
      {{"not an op"}, "$.ops[0]: expected an object"},
  };
  for (const Case& c : cases) {
    json spec = base;
    spec["ops"] = c.ops;
    EXPECT_NE(ErrorOf(spec).find(c.want), std::string::npos)
        << "spec " << spec.dump() << "\n  got: " << ErrorOf(spec) << "\n  want: " << c.want;
  }
  EXPECT_NE(ErrorOf({{"ops", json::array()}}).find("$.source: missing"), std::string::npos);
  EXPECT_NE(ErrorOf({{"source", {{"range", 1}, {"memory", "x"}}}}).find("exactly one"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"source", {{"range", 1}}}, {"sed", 1}}).find("$.sed: unknown field"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"source", {{"range", 1}}}, {"ops", 3}}).find("$.ops: expected an array"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"source", {{"memory", "nothing-here"}}}}).find("$.source.memory"),
            std::string::npos);
  auto bad_json = Pipeline::FromString("{\"source\": ");
  EXPECT_NE(bad_json.status().message().find("not valid JSON"), std::string::npos);
}

TEST(Spec, ExampleSpecFromArchitectureParses) {
  // The README's example spec, with an in-memory source instead of S3.
  RegisterMemoryDataset("arch-example", {});
  json spec = json::parse(R"({
    "source": {"memory": "arch-example"},
    "ops": [
      {"op": "shuffle", "seed": 7},
      {"op": "decode_image", "field": "jpg"},
      {"op": "random_resized_crop", "field": "jpg", "size": [224, 224]},
      {"op": "flip", "field": "jpg", "p": 0.5},
      {"op": "normalize", "field": "jpg", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
      {"op": "batch", "size": 256, "drop_remainder": true},
      {"op": "prefetch", "buffer": 4}
    ]})");
  EXPECT_EQ(ErrorOf(spec), "OK");
}

TEST(Spec, FingerprintIsStable) {
  auto a = testing::MustBuild(json::parse(R"({"source": {"range": 5}, "seed": 1,
      "ops": [{"op": "batch", "size": 2}]})"));
  auto b = testing::MustBuild(json::parse(R"({"ops": [{"size": 2, "op": "batch"}],
      "seed": 1, "threads": 3, "source": {"range": 5}})"));
  auto c = testing::MustBuild(json::parse(R"({"source": {"range": 5}, "seed": 2,
      "ops": [{"op": "batch", "size": 2}]})"));
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), c->fingerprint());
  EXPECT_EQ(a->fingerprint().size(), 32u);
}

std::string PluginPath() { return STOKER_TEST_PLUGIN_PATH; }

TEST(Plugin, LoadsAndRunsTheExamplePlugin) {
  json spec = {{"plugins", {PluginPath()}},
               {"source", {{"range", 3}}},
               {"ops",
                {{{"op", "cast"}, {"field", "value"}, {"to", "uint8"}},
                 {{"op", "invert"}, {"field", "value"}}}}};
  auto out = RunAll(spec);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].fields.at("value").values<uint8_t>()[0], 253);
  // The plugin's own parameters are validated with paths too.
  spec["ops"][1]["p"] = "often";
  EXPECT_NE(ErrorOf(spec).find("$.ops[1].p: expected a number"), std::string::npos);
  spec["plugins"] = {"/nonexistent/libnothing.so"};
  EXPECT_NE(ErrorOf(spec).find("$.plugins[0]: cannot load plugin"), std::string::npos);
}

// The worker's policy: only libraries whose real path is inside an allowed folder are loaded;
// nothing of a refused library runs (the check comes before dlopen).
TEST(Plugin, PolicyLoadsOnlyFromAllowedFolders) {
  const json spec = {{"plugins", {PluginPath()}},
                     {"source", {{"range", 3}}},
                     {"ops", {{{"op", "cast"}, {"field", "value"}, {"to", "uint8"}}}}};
  auto refused = Pipeline::FromJson(spec, PluginPolicy::OnlyFrom({}));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status()));
  EXPECT_NE(
      refused.status().message().find("$.plugins[0]: plugin '" + PluginPath() + "' is refused"),
      std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("--plugin-dir (none, so no plugin at all)"),
            std::string::npos);
  const std::string dir = PluginPath().substr(0, PluginPath().rfind('/'));
  EXPECT_TRUE(Pipeline::FromJson(spec, PluginPolicy::OnlyFrom({dir})).ok());
  EXPECT_TRUE(Pipeline::FromJson(spec, PluginPolicy::OnlyFrom({dir + "/"})).ok());
  // An allowed folder that does not hold the library (its parent's sibling) allows nothing here.
  EXPECT_FALSE(Pipeline::FromJson(spec, PluginPolicy::OnlyFrom({dir + "/../python"})).ok());
  json dotdot = spec;
  dotdot["plugins"] = {dir + "/../" + dir.substr(dir.rfind('/') + 1) + "/" +
                       PluginPath().substr(PluginPath().rfind('/') + 1)};
  EXPECT_TRUE(Pipeline::FromJson(dotdot, PluginPolicy::OnlyFrom({dir})).ok());
  json missing = spec;
  missing["plugins"] = {dir + "/libnothing.so"};
  EXPECT_TRUE(absl::IsPermissionDenied(
      Pipeline::FromJson(missing, PluginPolicy::OnlyFrom({dir})).status()));
}

// A shuffled image pipeline with every random op.
json ImagePipelineSpec(uint64_t seed) {
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::vector<Element> samples;
    std::mt19937 gen(1);
    for (int i = 0; i < 24; ++i) {
      int h = 40 + gen() % 30, w = 40 + gen() % 30;
      MutableBuffer pixels(static_cast<size_t>(h) * w * 3);
      for (size_t j = 0; j < pixels.size(); ++j) pixels.data()[j] = (j * 7 + i * 13 + j / 97) & 255;
      Tensor image{DType::kUint8, {h, w, 3}, std::move(pixels).Finish()};
      Element e;
      e.keys = {"k" + std::to_string(i)};
      e.fields["jpg"] = Tensor::Bytes(*EncodeJpeg(image, 90));
      e.fields["cls"] = Tensor::Bytes(Buffer::Copy(std::to_string(i % 5)));
      samples.push_back(std::move(e));
    }
    RegisterMemoryDataset("determinism", std::move(samples));
  }
  return {{"source", {{"memory", "determinism"}}},
          {"seed", seed},
          {"ops",
           {{{"op", "shuffle"}},
            {{"op", "decode_image"}, {"field", "jpg"}},
            {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", 20}},
            {{"op", "flip"}, {"field", "jpg"}},
            {{"op", "normalize"}, {"field", "jpg"}, {"mean", {0.4}}, {"std", {0.2}}},
            {{"op", "cast"}, {"field", "cls"}, {"to", "int64"}},
            {{"op", "batch"}, {"size", 5}},
            {{"op", "prefetch"}}}}};
}

TEST(Determinism, SameSeedSameOrderAndBytesAtOneAndFourThreads) {
  for (int64_t epoch : {0, 1}) {
    auto one = RunAll(ImagePipelineSpec(42), 1, epoch);
    auto four = RunAll(ImagePipelineSpec(42), 4, epoch);
    ASSERT_EQ(one.size(), 5u);
    ASSERT_EQ(one.size(), four.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(one[i].keys, four[i].keys);
      for (const auto& [name, t] : one[i].fields) {
        EXPECT_EQ(t.shape, four[i].fields.at(name).shape);
        EXPECT_TRUE(t.data.view() == four[i].fields.at(name).data.view()) << "field " << name;
      }
    }
    // Each key exactly once per epoch.
    auto keys = Keys(one);
    EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 24u);
  }
  EXPECT_NE(Keys(RunAll(ImagePipelineSpec(42))), Keys(RunAll(ImagePipelineSpec(43))));
}

// Saves at a random point, resumes in a new process (this test binary, re-run with a filter),
// and checks that the keys before and after make exactly one epoch.
TEST(Resume, InANewProcessYieldsExactlyTheRest) {
  if (std::getenv("STOKER_RESUME_TOKEN") != nullptr) GTEST_SKIP() << "child";
  json spec = ImagePipelineSpec(5);
  spec["ops"][6]["size"] = 2;  // 12 batches: more places to stop
  auto pipeline = testing::MustBuild(spec);
  auto full = Keys(RunAll(spec, 2));
  std::random_device rd;
  const int stop = static_cast<int>(rd() % 12);
  SCOPED_TRACE("saved after " + std::to_string(stop) + " batches");
  auto it = pipeline->MakeIterator(0, 2);
  std::vector<std::string> before;
  for (int i = 0; i < stop; ++i) {
    auto e = it->GetNext();
    ASSERT_TRUE(e.ok() && e->has_value());
    before.insert(before.end(), (*e)->keys.begin(), (*e)->keys.end());
  }
  auto token = it->Save();
  ASSERT_TRUE(token.ok()) << token.status();
  it.reset();

  auto dir = std::filesystem::temp_directory_path() / ("stoker_resume_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << *token;
  std::ofstream(dir / "spec.json") << spec.dump();
  std::string token_env = "STOKER_RESUME_TOKEN=" + (dir / "token").string();
  std::string spec_env = "STOKER_RESUME_SPEC=" + (dir / "spec.json").string();
  std::string out_env = "STOKER_RESUME_OUT=" + (dir / "keys").string();
  std::vector<std::string> env_strings = {token_env, spec_env, out_env};
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe");
  std::string filter = "--gtest_filter=Resume.DISABLED_Child";
  std::string also = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), also.data(), nullptr};
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);

  std::ifstream in(dir / "keys");
  std::vector<std::string> after;
  for (std::string line; std::getline(in, line);) after.push_back(line);
  std::filesystem::remove_all(dir);
  std::vector<std::string> all = before;
  all.insert(all.end(), after.begin(), after.end());
  EXPECT_EQ(all, full);
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 24u);
}

TEST(Resume, DISABLED_Child) {
  const char* token_path = std::getenv("STOKER_RESUME_TOKEN");
  ASSERT_NE(token_path, nullptr);
  std::ifstream token_in(token_path), spec_in(std::getenv("STOKER_RESUME_SPEC"));
  std::string token((std::istreambuf_iterator<char>(token_in)), {});
  json spec = json::parse(spec_in);
  ImagePipelineSpec(0);  // registers the in-memory dataset in this process
  auto pipeline = testing::MustBuild(spec);
  auto it = pipeline->MakeIterator(0, 1);
  ASSERT_TRUE(it->Restore(token).ok());
  std::ofstream out(std::getenv("STOKER_RESUME_OUT"));
  while (true) {
    auto e = it->GetNext();
    ASSERT_TRUE(e.ok()) << e.status();
    if (!e->has_value()) break;
    for (const auto& k : (*e)->keys) out << k << "\n";
  }
}

}  // namespace
}  // namespace stoker::data
