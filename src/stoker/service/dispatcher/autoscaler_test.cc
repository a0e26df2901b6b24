#include "stoker/service/dispatcher/autoscaler.h"

#include <gtest/gtest.h>

#include <limits>

namespace stoker::service {
namespace {

AutoscalerConfig Config() {
  AutoscalerConfig c;
  c.min_workers = 1;
  c.max_workers = 6;
  return c;
}

// A load: `workers` registered, consumers wanting `demand` elements/s, each worker producing
// `throughput` elements per busy second.
AutoscalerLoad Load(int workers, double demand, double throughput, double stall, double busy) {
  AutoscalerLoad l;
  l.workers = workers;
  l.consumers = 1;
  l.demand = demand;
  l.throughput = throughput;
  l.stall_ratio = stall;
  l.busy_share = busy;
  return l;
}

TEST(Autoscaler, RuleIsCeilOfDemandOverThroughputWithHeadroom) {
  Autoscaler a(Config(), 1);
  EXPECT_EQ(a.Rule(Load(1, 25, 10, 0.5, 1)), 3);    // 1.1 * 25 / 10 = 2.75
  EXPECT_EQ(a.Rule(Load(1, 30, 10, 0.5, 1)), 4);    // 3.3
  EXPECT_EQ(a.Rule(Load(1, 1000, 10, 0.5, 1)), 6);  // clamped to max
  EXPECT_EQ(a.Rule(Load(1, 0.1, 10, 0.5, 1)), 1);   // clamped to min
  EXPECT_EQ(a.Rule(Load(1, -1, 10, 0.5, 1)), -1);   // demand unknown
  EXPECT_EQ(a.Rule(Load(1, 25, 0, 0.5, 1)), -1);    // throughput unknown
  EXPECT_EQ(a.Rule(Load(1, std::numeric_limits<double>::infinity(), 10, 0.5, 1)), 6);
}

TEST(Autoscaler, RuleTakesWhatConsumersReceivedAsThroughputWhileStalling) {
  Autoscaler a(Config(), 1);
  // A consumer's first look: no worker heartbeat measured a busy time yet. 1 worker, trainers
  // wanting 80 elements/s, receiving 32 of their own time (stall 0.6): 1.1 * 80 / 32 = 2.75.
  AutoscalerLoad first = Load(1, 80, 0, 0.6, 0);
  first.delivered = 32;
  EXPECT_EQ(a.Rule(first), 3);
  first.workers = 2;  // the same received rate from 2 workers: each makes 16
  EXPECT_EQ(a.Rule(first), 6);
  // Not stalling: the workers are not the bottleneck, so what arrived says nothing of them.
  AutoscalerLoad calm = Load(1, 80, 0, 0.05, 0);
  calm.delivered = 76;
  EXPECT_EQ(a.Rule(calm), -1);
  // A measured throughput wins.
  first.workers = 1;
  first.throughput = 40;
  EXPECT_EQ(a.Rule(first), 3);  // 1.1 * 80 / 40 = 2.2
}

TEST(Autoscaler, GrowsToARememberedNeedAtOnceAndNeverShrinksForIt) {
  AutoscalerConfig c = Config();
  c.max_step_up = 2;
  Autoscaler a(c, 1);
  AutoscalerDecision d = a.Remembered(5, "remembered");  // not limited to max_step_up
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 5);
  EXPECT_FALSE(a.Remembered(3, "remembered").changed);  // fewer than it has: enough
  EXPECT_EQ(a.target(), 5);
  EXPECT_EQ(a.Remembered(9, "remembered").target, 6);  // clamped to max
  // The change's cool-down holds the next decisions.
  for (int i = 0; i < c.cooldown_intervals; ++i)
    EXPECT_FALSE(a.Decide(Load(6, 10, 10, 0.0, 0.1)).changed);
}

TEST(Autoscaler, AGuessGrowsAtOnceWithoutACoolDown) {
  Autoscaler a(Config(), 1);
  AutoscalerDecision d = a.Guess(3, "guess");
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 3);
  EXPECT_FALSE(a.Guess(2, "guess").changed);  // fewer than it has: enough
  EXPECT_EQ(a.Guess(9, "guess").target, 6);   // clamped to max
  Autoscaler b(Config(), 1);
  b.Guess(3, "guess");
  // The first look finds the trainers stalling with 3 and the rule at 5: it grows at once (a
  // remembered need's cool-down would hold it).
  d = b.Decide(Load(3, 140, 33, 0.4, 0.9));  // rule: 1.1 * 140 / 33 = 4.7
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 5);
}

TEST(Autoscaler, AGuessGoesDownToTheFirstMeasuredRuleAtOnce) {
  Autoscaler a(Config(), 1);
  a.Guess(3, "guess");
  // Before the new consumer's first look the rule may count other jobs' demand only: it holds.
  EXPECT_FALSE(a.Decide(Load(3, 20, 33, 0.0, 0.2)).changed);
  // Its first look: unknown throughput (no worker heartbeat yet) and no stall, so an unknown
  // rule: it holds.
  AutoscalerLoad first_look = Load(3, 20, 0, 0.0, 0.2);
  first_look.first_look = true;
  EXPECT_FALSE(a.Decide(first_look).changed);
  EXPECT_EQ(a.target(), 3);
  // The rule is measured at 1 (1.1 * 20 / 33): down to it without confirming intervals.
  AutoscalerDecision d = a.Decide(Load(3, 20, 33, 0.0, 0.2));
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 1);
  EXPECT_NE(d.reason.find("measured fewer than guessed"), std::string::npos) << d.reason;
  // Once measured, shrinking is the usual slow one again.
  Autoscaler b(Config(), 1);
  b.Guess(3, "guess");
  first_look = Load(3, 80, 33, 0.0, 0.9);
  first_look.first_look = true;
  EXPECT_FALSE(b.Decide(first_look).changed);  // the rule is 3: confirmed
  for (int i = 0; i < Config().down_confirm - 1; ++i)
    EXPECT_FALSE(b.Decide(Load(3, 20, 33, 0.0, 0.2)).changed);
  EXPECT_EQ(b.Decide(Load(3, 20, 33, 0.0, 0.2)).target, 2);  // one step, after confirming
}

TEST(Autoscaler, GrowsToTheRuleInBoundedStepsWhileStalling) {
  AutoscalerConfig c = Config();
  c.max_step_up = 2;
  Autoscaler a(c, 1);
  AutoscalerDecision d = a.Decide(Load(1, 45, 10, 0.8, 1));  // rule: 5
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 3);  // 1 + max_step_up
  EXPECT_EQ(d.rule, 5);
  // Cool-down: no decision for cooldown_intervals, whatever the load.
  for (int i = 0; i < c.cooldown_intervals; ++i)
    EXPECT_FALSE(a.Decide(Load(3, 45, 10, 0.8, 1)).changed);
  d = a.Decide(Load(3, 45, 10, 0.5, 1));
  EXPECT_EQ(d.target, 5);
}

TEST(Autoscaler, WaitsForStartedWorkersBeforeGrowingAgain) {
  Autoscaler a(Config(), 3);
  // Stalling, but only 1 of the 3 workers asked for has registered: hold.
  EXPECT_FALSE(a.Decide(Load(1, 45, 10, 0.8, 1)).changed);
  EXPECT_EQ(a.target(), 3);
}

TEST(Autoscaler, HoldsInTheHysteresisBand) {
  Autoscaler a(Config(), 3);
  // Stall between stall_low and stall_high, workers idle, rule says 1: no change, ever.
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(a.Decide(Load(3, 5, 10, 0.05, 0.2)).changed);
  // Stall low but workers busy: no change either.
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(a.Decide(Load(3, 5, 10, 0.0, 0.9)).changed);
}

TEST(Autoscaler, ShrinksOnlyAfterConfirmationAndNeverBelowTheRule) {
  AutoscalerConfig c = Config();
  Autoscaler a(c, 5);
  AutoscalerLoad idle = Load(5, 25, 10, 0.0, 0.3);  // rule: 3
  for (int i = 0; i < c.down_confirm - 1; ++i) EXPECT_FALSE(a.Decide(idle).changed);
  AutoscalerDecision d = a.Decide(idle);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 4);  // max_step_down 1
  for (int i = 0; i < c.cooldown_intervals + c.down_confirm; ++i) a.Decide(Load(4, 25, 10, 0, 0.3));
  EXPECT_EQ(a.target(), 3);
  for (int i = 0; i < 20; ++i) a.Decide(Load(3, 25, 10, 0, 0.3));
  EXPECT_EQ(a.target(), 3);  // the rule's N
}

TEST(Autoscaler, HillClimbsOnlyWhileAdditionsHelp) {
  AutoscalerConfig c = Config();
  Autoscaler a(c, 2);
  // The rule says 2 are enough, yet the trainer stalls: try one more.
  AutoscalerDecision d = a.Decide(Load(2, 15, 10, 0.5, 1));
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 3);
  for (int i = 0; i < c.cooldown_intervals; ++i) a.Decide(Load(3, 15, 10, 0.5, 1));
  // The stall did not fall: the addition did not help, so no more additions.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(a.Decide(Load(3, 15, 10, 0.5, 1)).changed);
  EXPECT_EQ(a.target(), 3);
}

TEST(Autoscaler, HillClimbsOnWhileAdditionsHelp) {
  AutoscalerConfig c = Config();
  Autoscaler a(c, 2);
  EXPECT_EQ(a.Decide(Load(2, -1, 0, 0.8, 1)).target, 3);  // nothing measured yet: climb
  for (int i = 0; i < c.cooldown_intervals; ++i) a.Decide(Load(3, -1, 0, 0.8, 1));
  EXPECT_EQ(a.Decide(Load(3, -1, 0, 0.4, 1)).target, 4);  // it helped: one more
}

TEST(Autoscaler, GoesToMinimumWithoutConsumers) {
  AutoscalerConfig c = Config();
  Autoscaler a(c, 4);
  AutoscalerLoad none;
  none.workers = 4;
  for (int i = 0; i < c.down_confirm - 1; ++i) EXPECT_FALSE(a.Decide(none).changed);
  AutoscalerDecision d = a.Decide(none);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.target, 1);
}

}  // namespace
}  // namespace stoker::service
