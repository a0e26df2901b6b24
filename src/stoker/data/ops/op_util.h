// Helpers shared by the op implementations in this folder (internal to stoker_data): stage
// timing, iterator-state checks, and ReplayIterator for ops that hold elements between calls.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/dataset.h"

namespace stoker::data::ops_internal {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// CPU time of the calling thread, so stage costs stay meaningful on a busy machine.
inline int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline absl::Status BadState(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("iterator state does not match this pipeline (", what,
                                           "); restore a token saved by the same spec"));
}

inline absl::StatusOr<int64_t> StateInt(const json& state, const char* key) {
  if (!state.is_object() || !state.contains(key) || !state[key].is_number_integer()) {
    return BadState(StrCat("missing '", key, "'"));
  }
  return state[key].get<int64_t>();
}

inline absl::StatusOr<const json*> StateChild(const json& state, const char* key) {
  if (!state.is_object() || !state.contains(key)) return BadState(StrCat("missing '", key, "'"));
  return &state[key];
}

// ---------------------------------------------------------------------------------------------
// Replay: ops that hold many elements between calls (shuffle buffer, buckets) save the input's
// state when they started plus how many elements they returned; Restore replays that many.
// Such ops usually sit before decoding, where replay is cheap.

class ReplayIterator : public Iterator {
 public:
  explicit ReplayIterator(std::unique_ptr<Iterator> input) : input_(std::move(input)) {}
  absl::StatusOr<std::optional<Element>> GetNext() final {
    if (!start_state_) {
      ASSIGN_OR_RETURN(start_state_, input_->Save());
    }
    ASSIGN_OR_RETURN(std::optional<Element> e, Produce());
    if (e) ++returned_;
    return e;
  }
  absl::StatusOr<json> Save() final {
    if (!start_state_) {
      ASSIGN_OR_RETURN(start_state_, input_->Save());
    }
    return json{{"start", *start_state_}, {"returned", returned_}};
  }
  absl::Status Restore(const json& state) final {
    ASSIGN_OR_RETURN(const json* start, StateChild(state, "start"));
    ASSIGN_OR_RETURN(int64_t returned, StateInt(state, "returned"));
    Reset();
    RETURN_IF_ERROR(input_->Restore(*start));
    start_state_ = *start;
    returned_ = 0;
    for (int64_t i = 0; i < returned; ++i) {
      ASSIGN_OR_RETURN(std::optional<Element> e, Produce());
      if (!e) return BadState("fewer elements on replay than saved");
    }
    returned_ = returned;
    return absl::OkStatus();
  }

 protected:
  virtual absl::StatusOr<std::optional<Element>> Produce() = 0;
  virtual void Reset() = 0;
  std::unique_ptr<Iterator> input_;

 private:
  std::optional<json> start_state_;
  int64_t returned_ = 0;
};

}  // namespace stoker::data::ops_internal
