// The disaggregated service end to end, with real processes on loopback: `stoker dispatcher`,
// N × `stoker worker` and `stoker consume --print-keys`. Every test checks that each key of the
// epoch is delivered exactly once, also when workers or the dispatcher are killed with SIGKILL.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "service_cluster.h"
#include "stoker/testing/subprocess.h"

namespace stoker::testing {
namespace {

using std::chrono::milliseconds;

std::string WriteSpec(const std::string& dir, int n) {
  std::string path = dir + "/spec.json";
  std::ofstream(path) << "{\"source\": {\"range\": " << n
                      << "}, \"ops\": [{\"op\": \"shuffle\", \"seed\": 3}]}";
  return path;
}

// Checks that consume.out holds every key 0..n-1 exactly `copies` times (sharding off: once per
// worker).
void ExpectExactlyOnce(const ServiceCluster& cluster, int n, int copies = 1) {
  std::istringstream in(ReadWholeFile(cluster.dir() + "/consume.out"));
  std::map<std::string, int> seen;
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++seen[line];
    ++lines;
  }
  int missing = 0, doubled = 0;
  for (int i = 0; i < n; ++i) {
    int c = seen.count(std::to_string(i)) ? seen[std::to_string(i)] : 0;
    missing += c < copies;
    doubled += c > copies;
  }
  EXPECT_EQ(lines, n * copies) << ReadWholeFile(cluster.dir() + "/consume.err");
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(doubled, 0);
}

// Waits (at most 30 s) until consume.out holds `bytes` bytes of keys: the epoch is under way.
void WaitUntilKeysArrive(const ServiceCluster& cluster, size_t bytes) {
  auto deadline = std::chrono::steady_clock::now() + milliseconds(30000);
  while (ReadWholeFile(cluster.dir() + "/consume.out").size() < bytes &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));  // polling a file another process writes
}

// Waits (at most 30 s) until the dispatcher has registered `n` workers (its journal,
// work/journal.log, says so), so that a test's job starts with all of them.
void WaitUntilWorkersRegistered(const ServiceCluster& cluster, int n) {
  const std::string line = "\"type\":\"register_worker\",\"worker_id\":" + std::to_string(n);
  auto deadline = std::chrono::steady_clock::now() + milliseconds(30000);
  while (ReadWholeFile(cluster.dir() + "/work/journal.log").find(line) == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));  // polling a file another process writes
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = MakeTempDir("stoker-service-test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ec);
  }
  // A fresh folder per trial.
  std::string TrialDir(const std::string& name) {
    std::string d = dir_ + "/" + name;
    std::filesystem::create_directories(d);
    return d;
  }
  std::string dir_;
};

TEST_F(ServiceTest, OneEpochThrough1And2And4Workers) {
  for (int workers : {1, 2, 4}) {
    SCOPED_TRACE(workers);
    ServiceCluster cluster(TrialDir("w" + std::to_string(workers)));
    const int n = 3000;
    std::string spec = WriteSpec(cluster.dir(), n);
    cluster.StartDispatcher();
    for (int i = 0; i < workers; ++i) cluster.AddWorker();
    auto consume = cluster.StartConsume(spec);
    ASSERT_EQ(consume->Wait(milliseconds(60000)), 0)
        << ReadWholeFile(cluster.dir() + "/consume.err");
    ExpectExactlyOnce(cluster, n);
  }
}

TEST_F(ServiceTest, KilledWorkerLosesNothing) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 10; ++trial) {
    SCOPED_TRACE(trial);
    ServiceCluster cluster(TrialDir("kill" + std::to_string(trial)));
    const int n = 100000;
    std::string spec = WriteSpec(cluster.dir(), n);
    cluster.StartDispatcher();
    cluster.AddWorker();
    cluster.AddWorker();
    WaitUntilWorkersRegistered(cluster, 2);  // so that the one killed has work to lose
    auto consume = cluster.StartConsume(spec);
    // A random point of the epoch (the kill itself is the event under test, not a synchronisation).
    std::this_thread::sleep_for(milliseconds(rng() % 400));
    cluster.worker(static_cast<int>(rng() % 2)).Kill9();
    ASSERT_EQ(consume->Wait(milliseconds(60000)), 0)
        << ReadWholeFile(cluster.dir() + "/consume.err");
    ExpectExactlyOnce(cluster, n);
  }
}

TEST_F(ServiceTest, DispatcherKilledAndRestartedFromJournal) {
  ServiceCluster cluster(TrialDir("dispatcher"));
  const int n = 400000;
  std::string spec = WriteSpec(cluster.dir(), n);
  cluster.StartDispatcher();
  cluster.AddWorker();
  cluster.AddWorker();
  auto consume = cluster.StartConsume(spec);
  WaitUntilKeysArrive(cluster, 2000);
  ASSERT_FALSE(consume->Exited()) << "the epoch ended before the dispatcher was killed";
  cluster.dispatcher().Kill9();
  cluster.StartDispatcher();  // same port and work dir: replays the journal
  ASSERT_EQ(consume->Wait(milliseconds(60000)), 0) << ReadWholeFile(cluster.dir() + "/consume.err");
  ExpectExactlyOnce(cluster, n);
  // The restarted dispatcher's line (its stdout file was truncated at restart) names the replay.
  std::string line = ReadWholeFile(cluster.dir() + "/dispatcher.out");
  EXPECT_NE(line.find("updates replayed"), std::string::npos) << line;
  EXPECT_EQ(line.find("(0 updates replayed)"), std::string::npos) << line;
}

// A dispatcher started on a journal that a dispatcher built before the modes were enums wrote (its
// job records spell them: "sharding":"off", "partial_round":"pad", ...; main at 968443e, four
// finished jobs) replays it and goes on: a new job with sharding off and zstd gets its id after
// them, every key once per worker, and its record spells its modes as the old ones did. A bad
// mode on the command line is refused naming the flag, the value and the allowed values.
TEST_F(ServiceTest, ReplaysAJournalWrittenWithStringModesAndGoesOn) {
  ServiceCluster cluster(TrialDir("old-journal"));
  std::filesystem::create_directories(cluster.dir() + "/work");
  std::filesystem::copy_file(STOKER_SOURCE_DIR
                             "/tests/fuzz/corpus/journal_replay_fuzzer/main_string_modes.log",
                             cluster.dir() + "/work/journal.log");
  const int n = 2000;
  std::string spec = WriteSpec(cluster.dir(), n);
  cluster.StartDispatcher();
  ASSERT_FALSE(cluster.dispatcher().Exited()) << ReadWholeFile(cluster.dir() + "/dispatcher.err");
  cluster.AddWorker();
  cluster.AddWorker();
  // The journal's worker 1 is long gone; these two register after it.
  WaitUntilWorkersRegistered(cluster, 3);

  auto bad = cluster.StartConsume(spec, {"--sharding", "sideways"});
  EXPECT_NE(bad->Wait(milliseconds(30000)), 0);
  std::string err = ReadWholeFile(cluster.dir() + "/consume.err");
  EXPECT_NE(err.find("--sharding: unknown sharding 'sideways': use 'dynamic' or 'off'"),
            std::string::npos)
      << err;

  auto consume = cluster.StartConsume(spec, {"--sharding", "off", "--compression", "zstd"});
  ASSERT_EQ(consume->Wait(milliseconds(60000)), 0) << ReadWholeFile(cluster.dir() + "/consume.err");
  ExpectExactlyOnce(cluster, n, 2);
  err = ReadWholeFile(cluster.dir() + "/consume.err");
  EXPECT_NE(err.find("of job 5 "), std::string::npos) << err;
  const std::string journal = ReadWholeFile(cluster.dir() + "/work/journal.log");
  const size_t job5 = journal.find("\"job_id\":5,");
  ASSERT_NE(job5, std::string::npos) << journal;
  const std::string record = journal.substr(journal.rfind('{', job5));
  EXPECT_NE(record.find("\"sharding\":\"off\""), std::string::npos) << record;
  EXPECT_NE(record.find("\"compression\":\"zstd\""), std::string::npos) << record;
  const std::string log = ReadWholeFile(cluster.dir() + "/dispatcher.err");
  EXPECT_NE(log.find("dispatcher: replayed 28 updates from"), std::string::npos) << log;
}

// Compressed payloads (zstd, lz4) with one request or several in flight per worker, sharding off
// (every worker runs the whole pipeline: each key once per worker), and several epochs a job.
TEST_F(ServiceTest, CompressionRequestsInFlightAndShardingOff) {
  struct Trial {
    std::string name;
    std::vector<std::string> flags;
    int copies;
  };
  for (const Trial& t : {Trial{"zstd", {"--compression", "zstd"}, 1},
                         Trial{"lz4-1", {"--compression", "lz4", "--requests-per-worker", "1"}, 1},
                         Trial{"off", {"--sharding", "off", "--requests-per-worker", "3"}, 2},
                         // Three epochs in one job: each key three times (once an epoch).
                         Trial{"epochs", {"--epochs", "3"}, 3},
                         Trial{"off-epochs", {"--sharding", "off", "--epochs", "2"}, 4}}) {
    SCOPED_TRACE(t.name);
    ServiceCluster cluster(TrialDir(t.name));
    const int n = 20000;
    std::string spec = WriteSpec(cluster.dir(), n);
    cluster.StartDispatcher();
    cluster.AddWorker();
    cluster.AddWorker();
    // Both workers registered before the job starts (with sharding off, one may run it alone).
    WaitUntilWorkersRegistered(cluster, 2);
    auto consume = cluster.StartConsume(spec, t.flags);
    ASSERT_EQ(consume->Wait(milliseconds(60000)), 0)
        << ReadWholeFile(cluster.dir() + "/consume.err");
    ExpectExactlyOnce(cluster, n, t.copies);
  }
}

// SIGTERM is a graceful stop: the worker finishes its splits, waits until the client has them, and
// tells the dispatcher it leaves (no timeout to wait out); the epoch completes exactly once.
TEST_F(ServiceTest, WorkerStoppedWithSigtermDrainsAndLeaves) {
  ServiceCluster cluster(TrialDir("sigterm"));
  const int n = 400000;
  std::string spec = WriteSpec(cluster.dir(), n);
  setenv("STOKER_LOG", "info", 1);  // the dispatcher logs "left" at info level
  cluster.StartDispatcher();
  unsetenv("STOKER_LOG");
  cluster.AddWorker();
  cluster.AddWorker();
  WaitUntilWorkersRegistered(cluster, 2);  // the one stopped must have work to drain
  auto consume = cluster.StartConsume(spec);
  WaitUntilKeysArrive(cluster, 2000);
  ASSERT_FALSE(consume->Exited()) << "the epoch ended before the worker was stopped";
  cluster.worker(0).Signal(SIGTERM);
  EXPECT_EQ(cluster.worker(0).Wait(milliseconds(20000)), 0)
      << ReadWholeFile(cluster.dir() + "/worker0.err");
  ASSERT_EQ(consume->Wait(milliseconds(60000)), 0) << ReadWholeFile(cluster.dir() + "/consume.err");
  ExpectExactlyOnce(cluster, n);
  std::string log = ReadWholeFile(cluster.dir() + "/dispatcher.err");
  EXPECT_NE(log.find(") left"), std::string::npos) << log;
  EXPECT_EQ(log.find("missed its heartbeats"), std::string::npos) << log;
}

TEST_F(ServiceTest, WorkerAddedMidEpochTakesAShare) {
  ServiceCluster cluster(TrialDir("added"));
  const int n = 200000;
  std::string spec = WriteSpec(cluster.dir(), n);
  cluster.StartDispatcher();
  cluster.AddWorker();
  auto consume = cluster.StartConsume(spec);
  WaitUntilKeysArrive(cluster, 1);
  cluster.AddWorker();
  ASSERT_EQ(consume->Wait(milliseconds(60000)), 0) << ReadWholeFile(cluster.dir() + "/consume.err");
  ExpectExactlyOnce(cluster, n);
  // The journal records who got each split: the second worker (id 2) got some.
  std::string journal = ReadWholeFile(cluster.dir() + "/work/journal.log");
  EXPECT_NE(journal.find("\"type\":\"create_split\",\"worker_id\":2"), std::string::npos);
}

}  // namespace
}  // namespace stoker::testing
