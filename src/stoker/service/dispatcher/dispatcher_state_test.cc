#include "stoker/service/dispatcher/dispatcher_state.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "stoker/service/common/journal.h"
#include "stoker/service/common/modes_proto.h"
#include "stoker/testing/subprocess.h"

namespace stoker::service {
namespace {

using nlohmann::json;

TEST(DispatcherState, LostWorkersSplitsArePendingUntilAcknowledged) {
  DispatcherState s;
  ASSERT_TRUE(s.Apply({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}}).ok());
  ASSERT_TRUE(
      s.Apply({{"type", "create_job"}, {"job_id", 1}, {"fingerprint", "f"}, {"num_samples", 10}})
          .ok());
  ASSERT_TRUE(s.Apply({{"type", "register_worker"}, {"worker_id", 1}, {"address", "a:1"}}).ok());
  ASSERT_TRUE(s.Apply({{"type", "create_split"},
                       {"job_id", 1},
                       {"split_id", 0},
                       {"begin", 0},
                       {"end", 4},
                       {"worker_id", 1}})
                  .ok());
  ASSERT_TRUE(s.Apply({{"type", "create_split"},
                       {"job_id", 1},
                       {"split_id", 1},
                       {"begin", 4},
                       {"end", 10},
                       {"worker_id", 1}})
                  .ok());
  ASSERT_TRUE(s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0}}}).ok());
  ASSERT_TRUE(s.Apply({{"type", "remove_worker"}, {"worker_id", 1}}).ok());
  const auto* job = s.FindJob(1);
  ASSERT_EQ(job->pending.size(), 1u);  // split 0 was acknowledged, split 1 was not
  EXPECT_EQ(job->pending.front(), 1);
  EXPECT_FALSE(s.JobFinished(*job));
  ASSERT_TRUE(s.Apply({{"type", "register_worker"}, {"worker_id", 2}, {"address", "b:1"}}).ok());
  ASSERT_TRUE(
      s.Apply({{"type", "lease_split"}, {"job_id", 1}, {"split_id", 1}, {"worker_id", 2}}).ok());
  EXPECT_TRUE(job->pending.empty());
  ASSERT_TRUE(s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {1, 1}}}).ok());
  EXPECT_TRUE(s.JobFinished(*job));
}

TEST(DispatcherState, CrossTrainerSplitsAreDoneOnceEveryLiveTrainerAcknowledged) {
  DispatcherState s;
  ASSERT_TRUE(s.Apply({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}}).ok());
  ASSERT_TRUE(s.Apply({{"type", "create_job"},
                       {"job_id", 1},
                       {"name", "trials"},
                       {"fingerprint", "f"},
                       {"num_samples", 10},
                       {"cross_trainer_cache", true},
                       {"on_fall_behind", "recompute"}})
                  .ok());
  ASSERT_TRUE(s.Apply({{"type", "register_worker"}, {"worker_id", 1}, {"address", "a:1"}}).ok());
  for (int64_t c : {1, 2})
    ASSERT_TRUE(s.Apply({{"type", "register_client"},
                         {"client_id", c},
                         {"job_id", 1},
                         {"trainer_id", c == 1 ? "a" : "b"}})
                    .ok());
  ASSERT_TRUE(s.Apply({{"type", "create_split"},
                       {"job_id", 1},
                       {"split_id", 0},
                       {"begin", 0},
                       {"end", 10},
                       {"worker_id", 1}})
                  .ok());
  const auto* job = s.FindJob(1);
  ASSERT_TRUE(
      s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0}}, {"client_id", 1}}).ok());
  EXPECT_FALSE(job->splits.at(0).done);  // trainer b has not read it
  EXPECT_TRUE(job->FinishedFor(1));
  EXPECT_FALSE(job->FinishedFor(2));
  EXPECT_EQ(job->epochs_done(1), 1);
  EXPECT_EQ(job->epochs_done(2), 0);
  ASSERT_TRUE(
      s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0}}, {"client_id", 2}}).ok());
  EXPECT_TRUE(job->splits.at(0).done);
  // A trainer joining late reads the job from its start: the split is not done for it, and its
  // worker being gone, it is run again.
  ASSERT_TRUE(s.Apply({{"type", "remove_worker"}, {"worker_id", 1}}).ok());
  ASSERT_TRUE(
      s.Apply({{"type", "register_client"}, {"client_id", 3}, {"job_id", 1}, {"trainer_id", "c"}})
          .ok());
  EXPECT_FALSE(job->splits.at(0).done);
  EXPECT_EQ(job->pending.size(), 1u);
  EXPECT_FALSE(s.JobFinished(*job));
  // ... and once it leaves, nobody lacks the split any more.
  ASSERT_TRUE(s.Apply({{"type", "remove_client"}, {"client_id", 3}}).ok());
  EXPECT_TRUE(s.JobFinished(*job));
  // An acknowledgement without the trainer's client id is malformed.
  EXPECT_FALSE(s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0}}}).ok());
}

TEST(DispatcherState, EpochsFollowEachOtherAndSplitsStayInOne) {
  DispatcherState s;
  ASSERT_TRUE(s.Apply({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}}).ok());
  ASSERT_TRUE(s.Apply({{"type", "create_job"},
                       {"job_id", 1},
                       {"fingerprint", "f"},
                       {"num_samples", 10},
                       {"num_epochs", 3}})
                  .ok());
  const auto* job = s.FindJob(1);
  EXPECT_EQ(job->positions(), 30);
  ASSERT_TRUE(s.Apply({{"type", "create_split"},
                       {"job_id", 1},
                       {"split_id", 0},
                       {"begin", 0},
                       {"end", 10},
                       {"worker_id", 1}})
                  .ok());
  // Positions 10..29 are epochs 1 and 2: a split across their boundary is refused.
  EXPECT_FALSE(s.Apply({{"type", "create_split"},
                        {"job_id", 1},
                        {"split_id", 1},
                        {"begin", 10},
                        {"end", 21},
                        {"worker_id", 1}})
                   .ok());
  ASSERT_TRUE(s.Apply({{"type", "create_split"},
                       {"job_id", 1},
                       {"split_id", 1},
                       {"begin", 10},
                       {"end", 20},
                       {"worker_id", 1}})
                  .ok());
  ASSERT_TRUE(s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0, 1}}}).ok());
  EXPECT_FALSE(s.JobFinished(*job));  // epoch 2 is still to come
  ASSERT_TRUE(s.Apply({{"type", "create_split"},
                       {"job_id", 1},
                       {"split_id", 2},
                       {"begin", 20},
                       {"end", 30},
                       {"worker_id", 1}})
                  .ok());
  ASSERT_TRUE(s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {2}}}).ok());
  EXPECT_TRUE(s.JobFinished(*job));
  // Epoch counts out of range, and ones whose positions would overflow.
  for (json epochs : {json(0), json(-1), json(DispatcherState::kMaxEpochs + 1)})
    EXPECT_FALSE(s.Apply({{"type", "create_job"},
                          {"job_id", 2},
                          {"fingerprint", "f"},
                          {"num_samples", 10},
                          {"num_epochs", epochs}})
                     .ok());
  EXPECT_FALSE(s.Apply({{"type", "create_job"},
                        {"job_id", 2},
                        {"fingerprint", "f"},
                        {"num_samples", int64_t{1} << 50},
                        {"num_epochs", 1 << 19}})
                   .ok());
}

// What operators see of a job is journaled with it: its display name, creation time and whether
// its epochs are open-ended; journals from before have none of them.
TEST(DispatcherState, JobsKeepTheirDisplayNameAgeAndBound) {
  DispatcherState s;
  ASSERT_TRUE(s.Apply({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}}).ok());
  json create = {{"type", "create_job"},    {"job_id", 1},       {"fingerprint", "f"},
                 {"num_samples", 10},       {"num_epochs", 5},   {"display_name", "ann@h:train.py"},
                 {"created", 1796280000.5}, {"open_ended", true}};
  ASSERT_TRUE(s.Apply(create).ok());
  const DispatcherState::Job* job = s.FindJob(1);
  EXPECT_EQ(job->display_name, "ann@h:train.py");
  EXPECT_EQ(job->label(), "ann@h:train.py");
  EXPECT_DOUBLE_EQ(job->created, 1796280000.5);
  EXPECT_TRUE(job->open_ended);
  ASSERT_TRUE(s.Apply({{"type", "create_job"},
                       {"job_id", 2},
                       {"name", "eval"},
                       {"fingerprint", "f"},
                       {"num_samples", 10}})
                  .ok());
  EXPECT_EQ(s.FindJob(2)->label(), "eval");
  EXPECT_EQ(s.FindJob(2)->display_name, "");
  EXPECT_EQ(s.FindJob(2)->created, 0);
  EXPECT_FALSE(s.FindJob(2)->open_ended);
  ASSERT_TRUE(
      s.Apply({{"type", "create_job"}, {"job_id", 3}, {"fingerprint", "f"}, {"num_samples", 10}})
          .ok());
  EXPECT_EQ(s.FindJob(3)->label(), "job 3");
  for (auto [key, value] : {std::pair<const char*, json>{"display_name", 7},
                            {"created", "yesterday"},
                            {"created", -1},
                            {"open_ended", 1}}) {
    json bad = create;
    bad["job_id"] = 4;
    bad[key] = value;
    EXPECT_FALSE(s.Apply(bad).ok()) << bad.dump();
  }
  EXPECT_EQ(s.FindJob(4), nullptr);
}

TEST(DispatcherState, MalformedUpdatesAreErrors) {
  DispatcherState s;
  EXPECT_FALSE(s.Apply(json::array()).ok());
  EXPECT_FALSE(s.Apply({{"type", "nope"}}).ok());
  EXPECT_FALSE(s.Apply({{"type", "create_job"}}).ok());
  EXPECT_FALSE(s.Apply({{"type", "ack_splits"}, {"job_id", 9}, {"split_ids", {1}}}).ok());
}

// A job whose size is left to the workers, two consumers, one removed: its unacknowledged splits
// go back to pending, the job's epochs complete in order, and an ended job frees its name.
TEST(DispatcherState, ConsumersComeAndGoAndJobsEnd) {
  DispatcherState s;
  auto ok = [&](const json& u) { ASSERT_TRUE(s.Apply(u).ok()) << u.dump(); };
  ok({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}});
  ok({{"type", "create_job"},
      {"job_id", 1},
      {"name", "J"},
      {"fingerprint", "f"},
      {"num_samples", 0},
      {"num_epochs", 2},
      {"first_epoch", 3}});
  ok({{"type", "register_worker"}, {"worker_id", 1}, {"address", "a:1"}});
  const auto* job = s.FindJob(1);
  // No split before a worker counted the samples.
  EXPECT_FALSE(s.Apply({{"type", "create_split"},
                        {"job_id", 1},
                        {"split_id", 0},
                        {"begin", 0},
                        {"end", 4},
                        {"worker_id", 1}})
                   .ok());
  ok({{"type", "set_job_size"}, {"job_id", 1}, {"num_samples", 8}});
  EXPECT_FALSE(s.Apply({{"type", "set_job_size"}, {"job_id", 1}, {"num_samples", 9}}).ok());
  ok({{"type", "register_client"}, {"client_id", 1}, {"job_id", 1}});
  ok({{"type", "register_client"}, {"client_id", 2}, {"job_id", 1}, {"registration_id", "r2"}});
  EXPECT_EQ(job->clients.size(), 2u);
  EXPECT_EQ(s.clients().at(1).registration_id, "");  // journals before registration ids
  EXPECT_EQ(s.clients().at(2).registration_id, "r2");
  for (int i = 0; i < 4; ++i)
    ok({{"type", "create_split"},
        {"job_id", 1},
        {"split_id", i},
        {"begin", i * 4},
        {"end", i * 4 + 4},
        {"worker_id", 1}});
  EXPECT_EQ(job->epochs_done(), 3);
  ok({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0, 1}}});
  EXPECT_EQ(job->epochs_done(), 4);  // epoch 3 (positions 0..7) is complete
  // Client 2 was handed splits 1 and 2 and is removed: split 2 goes back, split 1 stays done.
  ok({{"type", "remove_client"}, {"client_id", 2}});
  ok({{"type", "requeue_splits"}, {"job_id", 1}, {"split_ids", {1, 2}}});
  EXPECT_EQ(job->removed_clients, std::vector<int64_t>{2});
  ASSERT_EQ(job->pending.size(), 1u);
  EXPECT_EQ(job->pending.front(), 2);
  EXPECT_EQ(s.FindJobByName("J"), std::optional<int64_t>(1));
  ok({{"type", "end_job"}, {"job_id", 1}, {"reason", "no consumer"}});
  EXPECT_EQ(s.FindJobByName("J"), std::nullopt);  // the name starts a new job now
  EXPECT_FALSE(s.Apply({{"type", "remove_client"}, {"client_id", 2}}).ok());
}

// Coordinated reads: a split is done once every consumer acknowledged its part.
TEST(DispatcherState, CoordinatedSplitsNeedEveryConsumer) {
  DispatcherState s;
  auto ok = [&](const json& u) { ASSERT_TRUE(s.Apply(u).ok()) << u.dump(); };
  ok({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}});
  ok({{"type", "create_job"},
      {"job_id", 1},
      {"fingerprint", "f"},
      {"num_samples", 4},
      {"num_consumers", 2}});
  ok({{"type", "register_worker"}, {"worker_id", 1}, {"address", "a:1"}});
  EXPECT_FALSE(
      s.Apply({{"type", "register_client"}, {"client_id", 1}, {"job_id", 1}, {"consumer_index", 2}})
          .ok());
  ok({{"type", "create_split"},
      {"job_id", 1},
      {"split_id", 0},
      {"begin", 0},
      {"end", 4},
      {"worker_id", 1}});
  ok({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0}}, {"consumer_index", 1}});
  EXPECT_FALSE(s.JobFinished(*s.FindJob(1)));
  ok({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0}}, {"consumer_index", 1}});
  EXPECT_FALSE(s.JobFinished(*s.FindJob(1)));  // the same consumer twice counts once
  ok({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0}}, {"consumer_index", 0}});
  EXPECT_TRUE(s.JobFinished(*s.FindJob(1)));
}

TEST(DispatcherState, AResumedJobRunsOnlyItsPieces) {
  DispatcherState s;
  ASSERT_TRUE(s.Apply({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}}).ok());
  ASSERT_TRUE(s.Apply({{"type", "register_worker"}, {"worker_id", 1}, {"address", "a:1"}}).ok());
  // Epoch 0 of 20 samples: [0, 4) and [10, 12) delivered, [4, 10) open, so [4, 10) runs exactly,
  // then [12, 20); epoch 1 runs whole.
  ASSERT_TRUE(s.Apply({{"type", "create_job"},
                       {"job_id", 1},
                       {"fingerprint", "f"},
                       {"num_samples", 20},
                       {"num_epochs", 2},
                       {"resume", {{4, 10, true}, {12, 20, false}}}})
                  .ok());
  const auto* job = s.FindJob(1);
  EXPECT_EQ(job->next_sample, 4);
  auto split = [&](int64_t id, int64_t begin, int64_t end) {
    return s.Apply({{"type", "create_split"},
                    {"job_id", 1},
                    {"split_id", id},
                    {"begin", begin},
                    {"end", end},
                    {"worker_id", 1}});
  };
  EXPECT_FALSE(split(0, 4, 8).ok());   // an exact piece is one split
  EXPECT_FALSE(split(0, 4, 14).ok());  // a split stays within its piece
  ASSERT_TRUE(split(0, 4, 10).ok());
  EXPECT_EQ(job->next_sample, 12);  // [10, 12) was delivered
  ASSERT_TRUE(split(1, 12, 20).ok());
  EXPECT_EQ(job->next_sample, 20);
  ASSERT_TRUE(s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {0, 1}}}).ok());
  EXPECT_EQ(job->epochs_done(), 1);
  ASSERT_TRUE(split(2, 20, 40).ok());
  ASSERT_TRUE(s.Apply({{"type", "ack_splits"}, {"job_id", 1}, {"split_ids", {2}}}).ok());
  EXPECT_TRUE(s.JobFinished(*job));
  // Pieces out of order, or without the epoch's size, are refused.
  EXPECT_FALSE(s.Apply({{"type", "create_job"},
                        {"job_id", 2},
                        {"fingerprint", "f"},
                        {"num_samples", 20},
                        {"resume", {{4, 10, true}, {8, 12, false}}}})
                   .ok());
  EXPECT_FALSE(s.Apply({{"type", "create_job"},
                        {"job_id", 2},
                        {"fingerprint", "f"},
                        {"num_samples", 0},
                        {"resume", json::array()}})
                   .ok());
  // Everything delivered: the job is finished at once.
  ASSERT_TRUE(s.Apply({{"type", "create_job"},
                       {"job_id", 3},
                       {"fingerprint", "f"},
                       {"num_samples", 20},
                       {"resume", json::array()}})
                  .ok());
  EXPECT_TRUE(s.JobFinished(*s.FindJob(3)));
}

// A journal written by the dispatcher of main at 968443e, before the modes were enums (its job
// records spell them as strings): four `stoker consume` runs, the default one, --sharding off
// --compression zstd, a coordinated job with --partial-round pad --compression lz4, and a
// cross-trainer cache job with --on-fall-behind skip; then the dispatcher was killed with kill -9.
// It is also a seed of journal_replay_fuzzer. Replayed now, each job has the modes it was created
// with.
TEST(DispatcherState, ReplaysAJournalWrittenWithStringModes) {
  testing::ScopedTempDir dir("stoker-old-journal");
  std::filesystem::copy_file(STOKER_SOURCE_DIR
                             "/tests/fuzz/corpus/journal_replay_fuzzer/main_string_modes.log",
                             dir.path() + "/journal.log");
  auto journal = Journal::Open(dir.path());
  ASSERT_TRUE(journal.ok()) << journal.status();
  auto updates = (*journal)->ReadAll();
  ASSERT_TRUE(updates.ok()) << updates.status();
  ASSERT_EQ(updates->size(), 28u);
  DispatcherState s;
  for (const json& u : *updates) ASSERT_TRUE(s.Apply(u).ok()) << u.dump();
  ASSERT_EQ(s.jobs().size(), 4u);
  struct Want {
    Sharding sharding;
    Compression compression;
    PartialRound partial_round;
    OnFallBehind on_fall_behind;
  };
  const std::map<int64_t, Want> want = {
      {1, {Sharding::kDynamic, Compression::kNone, PartialRound::kDrop, OnFallBehind::kRecompute}},
      {2, {Sharding::kOff, Compression::kZstd, PartialRound::kDrop, OnFallBehind::kRecompute}},
      {3, {Sharding::kDynamic, Compression::kLz4, PartialRound::kPad, OnFallBehind::kRecompute}},
      {4, {Sharding::kDynamic, Compression::kNone, PartialRound::kDrop, OnFallBehind::kSkip}}};
  for (const auto& [id, w] : want) {
    const DispatcherState::Job* job = s.FindJob(id);
    ASSERT_NE(job, nullptr) << id;
    EXPECT_EQ(job->sharding, w.sharding) << id;
    EXPECT_EQ(job->compression, w.compression) << id;
    EXPECT_EQ(job->partial_round, w.partial_round) << id;
    EXPECT_EQ(job->on_fall_behind, w.on_fall_behind) << id;
    EXPECT_TRUE(s.JobFinished(*job)) << id;  // every consumer read its job to the end
  }
  EXPECT_EQ(s.FindJob(3)->num_consumers, 1);
  EXPECT_TRUE(s.FindJob(4)->cross_trainer_cache);
  // A job written now spells its modes the same way, so a dispatcher built before the enums
  // replays a journal of this one too.
  for (const json& u : *updates) {
    if (u.value("type", "") != "create_job") continue;
    const DispatcherState::Job* job = s.FindJob(u["job_id"].get<int64_t>());
    EXPECT_EQ(u["sharding"], ModeName(job->sharding));
    EXPECT_EQ(u["compression"], ModeName(job->compression));
    EXPECT_EQ(u["partial_round"], ModeName(job->partial_round));
    if (u.contains("on_fall_behind")) {
      EXPECT_EQ(u["on_fall_behind"], ModeName(job->on_fall_behind));
    }
  }
}

// A create_job with a mode no version spells is refused, naming the field, the value and the
// spellings allowed; the state is unchanged.
TEST(DispatcherState, RefusesAnUnknownModeNamingIt) {
  for (const auto& [field, value, message] :
       std::vector<std::tuple<std::string, json, std::string>>{
           {"sharding", "sideways", "unknown sharding 'sideways': use 'dynamic' or 'off'"},
           {"compression", "gzip", "unknown compression 'gzip': use 'none', 'zstd' or 'lz4'"},
           {"partial_round", "", "unknown partial_round '': use 'drop' or 'pad'"},
           {"on_fall_behind", "later", "unknown on_fall_behind 'later': use 'recompute' or 'skip'"},
           {"sharding", 2, "'sharding' is not a string"}}) {
    DispatcherState s;
    ASSERT_TRUE(s.Apply({{"type", "register_dataset"}, {"fingerprint", "f"}, {"spec", "{}"}}).ok());
    json create = {{"type", "create_job"}, {"job_id", 1}, {"fingerprint", "f"}, {"num_samples", 5}};
    create[field] = value;
    absl::Status st = s.Apply(create);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find(message), std::string_view::npos) << st;
    EXPECT_TRUE(s.jobs().empty());
  }
}

// Every mode's spellings read back to the mode, and the wire's numbers map both ways (a peer built
// before the enums sends only the string; unspecified is the default).
TEST(ServiceModes, SpellingsAndWireNumbersRoundTrip) {
  for (std::string_view name : ModeNames<Sharding>())
    EXPECT_EQ(ModeName(*ParseMode<Sharding>(name)), name);
  for (std::string_view name : ModeNames<PartialRound>())
    EXPECT_EQ(ModeName(*ParseMode<PartialRound>(name)), name);
  for (std::string_view name : ModeNames<OnFallBehind>())
    EXPECT_EQ(ModeName(*ParseMode<OnFallBehind>(name)), name);
  EXPECT_EQ(ModeNames<Sharding>(), (std::vector<std::string_view>{"dynamic", "off"}));
  EXPECT_EQ(ParseMode<Sharding>("Dynamic").status().message(),
            "unknown sharding 'Dynamic': use 'dynamic' or 'off'");
  EXPECT_EQ(CheckMode(static_cast<PartialRound>(0)).message(),
            "unknown partial_round 0: use 'drop' or 'pad'");

  const JobModes modes = {Sharding::kOff, Compression::kLz4, PartialRound::kPad,
                          OnFallBehind::kSkip};
  Task task;
  SetModes(modes, &task);
  EXPECT_EQ(task.sharding_mode(), SHARDING_OFF);
  EXPECT_EQ(task.compression_mode(), COMPRESSION_LZ4);
  EXPECT_EQ(task.partial_round_mode(), PARTIAL_ROUND_PAD);
  EXPECT_EQ(task.on_fall_behind_mode(), ON_FALL_BEHIND_SKIP);
  auto read = ModesOf(task);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->sharding, Sharding::kOff);
  EXPECT_EQ(read->compression, Compression::kLz4);
  EXPECT_EQ(read->partial_round, PartialRound::kPad);
  EXPECT_EQ(read->on_fall_behind, OnFallBehind::kSkip);

  GetOrCreateJobRequest old;  // from a client built before the enums: strings only
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  old.set_sharding("off");
  old.set_compression("zstd");
  old.set_partial_round("pad");
#pragma GCC diagnostic pop
  read = ModesOf(old);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->sharding, Sharding::kOff);
  EXPECT_EQ(read->compression, Compression::kZstd);
  EXPECT_EQ(read->partial_round, PartialRound::kPad);
  EXPECT_EQ(read->on_fall_behind, OnFallBehind::kRecompute);  // "": the default
  EXPECT_TRUE(ModesOf(GetOrCreateJobRequest()).ok());         // nothing given: the defaults
  old.set_compression_mode(static_cast<CompressionMode>(9));  // the enum wins over the string
  EXPECT_EQ(ModesOf(old).status().message(),
            "unknown compression (number 9 on the wire): this build knows 'none' 'zstd' 'lz4'");
}

}  // namespace
}  // namespace stoker::service
