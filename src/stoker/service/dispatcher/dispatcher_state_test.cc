#include "stoker/service/dispatcher/dispatcher_state.h"

#include <gtest/gtest.h>

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

TEST(DispatcherState, MalformedUpdatesAreErrors) {
  DispatcherState s;
  EXPECT_FALSE(s.Apply(json::array()).ok());
  EXPECT_FALSE(s.Apply({{"type", "nope"}}).ok());
  EXPECT_FALSE(s.Apply({{"type", "create_job"}}).ok());
  EXPECT_FALSE(s.Apply({{"type", "ack_splits"}, {"job_id", 9}, {"split_ids", {1}}}).ok());
}

}  // namespace
}  // namespace stoker::service
