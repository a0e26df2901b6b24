#include "stoker/service/dispatcher/autoscaler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace stoker::service {

Autoscaler::Autoscaler(const AutoscalerConfig& config, int initial)
    : config_(config), target_(std::clamp(initial, config.min_workers, config.max_workers)) {}

double Autoscaler::Throughput(const AutoscalerLoad& load) const {
  if (load.throughput > 0) return load.throughput;
  // A worker's busy time arrives with its heartbeats, so at a consumer's first look it may not
  // be measured yet; while the trainers stall, what they receive is what the workers make.
  if (load.stall_ratio > config_.stall_high && load.workers > 0 && load.delivered > 0)
    return load.delivered / load.workers;
  return 0;
}

int Autoscaler::Rule(const AutoscalerLoad& load) const {
  const double throughput = Throughput(load);
  if (load.demand < 0 || !(throughput > 0)) return -1;
  if (std::isinf(load.demand)) return config_.max_workers;
  double n = std::ceil(config_.headroom * load.demand / throughput);
  n = std::clamp(n, static_cast<double>(config_.min_workers),
                 static_cast<double>(config_.max_workers));
  return static_cast<int>(n);
}

AutoscalerDecision Autoscaler::Change(int target, int rule, std::string reason) {
  AutoscalerDecision d;
  d.target = std::clamp(target, config_.min_workers, config_.max_workers);
  d.rule = rule;
  d.changed = d.target != target_;
  d.reason = std::move(reason);
  target_ = d.target;
  if (d.changed) cooldown_ = config_.cooldown_intervals;
  down_streak_ = 0;
  guessed_ = false;
  return d;
}

AutoscalerDecision Autoscaler::Remembered(int workers, std::string reason) {
  if (workers <= target_) return AutoscalerDecision{target_, -1, false, "remembered: enough"};
  return Change(workers, -1, std::move(reason));
}

AutoscalerDecision Autoscaler::Guess(int workers, std::string reason) {
  if (workers <= target_) return AutoscalerDecision{target_, -1, false, "guess: enough"};
  const int cooldown = cooldown_;  // a guess adds none (one that is running goes on)
  AutoscalerDecision d = Change(workers, -1, std::move(reason));
  cooldown_ = cooldown;
  guessed_ = true;
  guess_looked_ = false;
  return d;
}

AutoscalerDecision Autoscaler::Decide(const AutoscalerLoad& load) {
  const int rule = Rule(load);
  auto hold = [&](std::string reason) {
    return AutoscalerDecision{target_, rule, false, std::move(reason)};
  };
  const double throughput = Throughput(load);
  const std::string measured = absl::StrFormat(
      "demand %.1f elements/s, %s, rule %d, stall %.2f, busy %.2f, %d of %d workers registered%s",
      load.demand,
      throughput == 0       ? std::string("throughput unknown")
      : load.throughput > 0 ? absl::StrFormat("%.1f elements/s per busy worker", throughput)
                            : absl::StrFormat("%.1f elements/s per worker (received while "
                                              "stalling)",
                                              throughput),
      rule, load.stall_ratio, load.busy_share, load.workers, target_,
      load.first_look ? "; first look at a new consumer" : "");
  if (guessed_ && load.first_look) guess_looked_ = true;
  if (cooldown_ > 0) {
    --cooldown_;
    return hold("cool-down");
  }
  if (guessed_ && guess_looked_ && rule >= 0 && load.stall_ratio <= config_.stall_high) {
    guessed_ = false;  // measured: the guess holds, or goes down to what was measured
    if (rule < target_) return Change(rule, rule, "measured fewer than guessed: " + measured);
  }
  if (stall_before_climb_ >= 0) {  // the last hill-climbing step's effect, now measured
    climb_helped_ = load.stall_ratio < stall_before_climb_ * (1 - config_.helped_improvement);
    stall_before_climb_ = -1;
  }
  if (load.consumers == 0) {
    climb_helped_ = true;  // the next job climbs afresh
    if (target_ <= config_.min_workers) {
      down_streak_ = 0;
      return hold("no consumers");
    }
    if (++down_streak_ < config_.down_confirm) return hold("no consumers (confirming)");
    return Change(config_.min_workers, rule, "no consumers: " + measured);
  }
  if (load.stall_ratio > config_.stall_high) {
    down_streak_ = 0;
    if (target_ >= config_.max_workers) return hold("stalling at max workers");
    if (load.workers < target_) return hold("stalling; waiting for started workers to register");
    if (rule > target_)
      return Change(std::min(rule, target_ + config_.max_step_up), rule, "rule: " + measured);
    if (!climb_helped_) return hold("stalling, but the last added worker did not help");
    stall_before_climb_ = load.stall_ratio;
    return Change(target_ + 1, rule, "hill climbing (stalling): " + measured);
  }
  if (load.stall_ratio < config_.stall_low && load.busy_share < config_.idle_busy_share &&
      target_ > config_.min_workers && (rule < 0 || rule < target_)) {
    if (++down_streak_ < config_.down_confirm) return hold("idle (confirming)");
    int to = std::max(target_ - config_.max_step_down, std::max(rule, config_.min_workers));
    climb_helped_ = true;
    return Change(to, rule, "idle workers, no stall: " + measured);
  }
  down_streak_ = 0;
  return hold("steady");
}

}  // namespace stoker::service
