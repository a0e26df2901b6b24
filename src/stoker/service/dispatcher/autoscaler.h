// The autoscaler's policy (docs/operations.md, "Autoscaler"): from the load measured over the
// last interval, the number of workers the service should run.
//
// The rule (as tf.data service's "optimal number of workers"):
//   N = ceil(headroom * demand / throughput)
// where demand is the elements per second the consumers would take if they never waited (each
// consumer's elements / its compute seconds, summed) and throughput the mean elements per busy
// second of a worker. It is confirmed by the trainers' stall ratio (wait / (wait + compute)),
// as Cachew does: the service grows only while the trainers stall (stall > stall_high), to N at
// once (at most max_step_up workers a step), or by one worker at a time (hill climbing) when N
// says there are enough but the trainers still stall, as long as the last such addition lowered
// the stall. It shrinks only while the trainers do not stall (stall < stall_low) and the workers
// are idle (busy share < idle_busy_share) for down_confirm intervals in a row, by at most
// max_step_down workers a step and never below N; without any consumer it goes to min_workers.
// Between stall_low and stall_high it holds (hysteresis), and after every change it holds for a
// cool-down, so that the new workers' effect is measured before the next decision.
// A job's start comes before any measure: one of a pipeline read before grows to the need
// remembered from it (Remembered), one of a pipeline never read by the standby workers (Guess).
//
// Thread safety: none (the dispatcher's autoscaler thread owns it).
#pragma once

#include <chrono>
#include <string>

namespace stoker::service {

struct AutoscalerConfig {
  int min_workers = 1;
  int max_workers = 8;
  double stall_high = 0.10;  // above: the trainers wait for data
  double stall_low = 0.03;   // below (and idle workers): more workers than needed
  double idle_busy_share = 0.6;
  double headroom = 1.1;  // capacity kept above the measured demand
  int max_step_up = 2;
  int max_step_down = 1;
  int cooldown_intervals = 2;       // decisions skipped after a change
  int down_confirm = 3;             // intervals in a row that must call for fewer workers
  double helped_improvement = 0.1;  // a hill-climbing addition helped: stall fell by this share
  // A new consumer's first look: the dispatcher measures and decides at the consumer's first
  // heartbeat after it has read this long, or that reports first_look_elements delivered (the
  // first and two that followed the trainer's work: enough to tell its demand), whichever comes
  // first, without waiting for the interval's end. The consumer heartbeats at once when it has
  // delivered that many (ServiceClient's kFirstLookElements).
  std::chrono::milliseconds first_look{150};
  int first_look_elements = 3;
};

// The load over one interval (the dispatcher measures it from the heartbeats).
struct AutoscalerLoad {
  int workers = 0;    // registered workers
  int consumers = 0;  // consumers that heartbeat
  // Elements per second the consumers would take without waiting; < 0: unknown (no consumer
  // delivered an element yet); +infinity: a consumer computes nothing between its calls.
  double demand = -1;
  double throughput = 0;   // mean elements per busy second of a worker; 0: unknown
  double busy_share = 0;   // mean share of the interval workers were busy
  double stall_ratio = 0;  // of every consumer together; 0 without consumers
  // Elements per second of their own time (wait + compute) the consumers received, summed.
  double delivered = 0;
  bool first_look = false;  // measured at a new consumer's first look, not an interval's end
};

struct AutoscalerDecision {
  int target = 0;        // workers wanted after this decision
  int rule = -1;         // N of the rule (clamped to min .. max); -1: unknown
  bool changed = false;  // target differs from the previous one
  std::string reason;    // why (logged with every change)
};

class Autoscaler {
 public:
  // Starts with `initial` workers wanted (clamped to min .. max).
  Autoscaler(const AutoscalerConfig& config, int initial);
  // One decision, at the end of an interval.
  AutoscalerDecision Decide(const AutoscalerLoad& load);
  // A job starts whose pipeline needed `workers` when last read: grows to them at once (never
  // shrinks; clamped to max), with the cool-down of any change.
  AutoscalerDecision Remembered(int workers, std::string reason);
  // A job starts whose pipeline was never read, and `workers` can run without a start-up (the
  // target plus the actuator's standby workers): grows to them at once, clamped to max, as a
  // guess. No cool-down follows (the new consumer's first look is the first measure of it), and
  // the first decision from that first look on whose rule is known and whose trainers do not
  // stall goes down to that rule at once (no confirming intervals) if the guess was more.
  AutoscalerDecision Guess(int workers, std::string reason);
  int target() const { return target_; }
  const AutoscalerConfig& config() const { return config_; }

  // The rule's N for this load, clamped to min .. max; -1 if demand or throughput is unknown.
  // Without a measured throughput, while the trainers stall (the workers are the bottleneck),
  // the throughput is taken as what the consumers received per registered worker.
  int Rule(const AutoscalerLoad& load) const;
  // The throughput Rule uses: measured, else that estimate while stalling; 0: unknown.
  double Throughput(const AutoscalerLoad& load) const;

 private:
  AutoscalerDecision Change(int target, int rule, std::string reason);
  const AutoscalerConfig config_;
  int target_;
  int cooldown_ = 0;     // decisions left to skip
  int down_streak_ = 0;  // intervals in a row that called for fewer workers
  // The target is a Guess no decision has measured yet; and a first look came since (the new
  // job's consumer measured: before it, the rule may count only the other jobs' demand).
  bool guessed_ = false;
  bool guess_looked_ = false;
  // Hill climbing: the stall before the last addition beyond the rule (< 0: none pending), and
  // whether the last such addition lowered it.
  double stall_before_climb_ = -1;
  bool climb_helped_ = true;
};

}  // namespace stoker::service
