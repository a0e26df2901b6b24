// A job's modes on the wire (proto/stoker/service.proto): GetOrCreateJobRequest and Task carry
// each mode as an enum and, deprecated, as its spelling. Read: the enum; unspecified, the string
// of a peer built before the enums (ParseMode); neither, the default. Written: both, so that such
// a peer reads the same mode. The only code that touches the deprecated string fields.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/service.pb.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/consumer.h"

namespace stoker::service {

// Every mode of a job, defaults as the wire's unspecified values.
struct JobModes {
  Sharding sharding = Sharding::kDynamic;
  Compression compression = Compression::kNone;
  PartialRound partial_round = PartialRound::kDrop;
  OnFallBehind on_fall_behind = OnFallBehind::kRecompute;
};

static_assert(static_cast<int>(Sharding::kDynamic) == SHARDING_DYNAMIC &&
              static_cast<int>(Sharding::kOff) == SHARDING_OFF);
static_assert(static_cast<int>(PartialRound::kDrop) == PARTIAL_ROUND_DROP &&
              static_cast<int>(PartialRound::kPad) == PARTIAL_ROUND_PAD);
static_assert(static_cast<int>(OnFallBehind::kRecompute) == ON_FALL_BEHIND_RECOMPUTE &&
              static_cast<int>(OnFallBehind::kSkip) == ON_FALL_BEHIND_SKIP);
// Compression's numbers are its payload header's (element_codec.h), from 0; the wire's are one
// more, 0 being "unspecified".
static_assert(static_cast<int>(Compression::kNone) + 1 == COMPRESSION_NONE &&
              static_cast<int>(Compression::kZstd) + 1 == COMPRESSION_ZSTD &&
              static_cast<int>(Compression::kLz4) + 1 == COMPRESSION_LZ4);

template <typename Mode>
constexpr int WireNumber(Mode mode) {
  return static_cast<int>(mode) + (std::is_same_v<Mode, Compression> ? 1 : 0);
}

// The mode of a wire enum `number` (0: the deprecated `spelling`; empty: `fallback`).
template <typename Mode>
absl::StatusOr<Mode> ModeFromWire(int number, std::string_view spelling, Mode fallback) {
  if (number != 0) {
    const Mode mode = static_cast<Mode>(number - (std::is_same_v<Mode, Compression> ? 1 : 0));
    if (!CheckMode(mode).ok()) {  // a peer built later, with more modes
      std::string names;
      for (std::string_view name : ModeNames<Mode>()) names += StrCat(" '", name, "'");
      return absl::InvalidArgumentError(StrCat("unknown ", ModeField<Mode>(), " (number ", number,
                                               " on the wire): this build knows", names));
    }
    return mode;
  }
  if (spelling.empty()) return fallback;
  return ParseMode<Mode>(spelling);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

// Msg: GetOrCreateJobRequest or Task. InvalidArgument naming the mode for an unknown value.
template <typename Msg>
absl::StatusOr<JobModes> ModesOf(const Msg& m) {
  JobModes modes;
  ASSIGN_OR_RETURN(modes.sharding, ModeFromWire(m.sharding_mode(), m.sharding(), modes.sharding));
  ASSIGN_OR_RETURN(modes.compression,
                   ModeFromWire(m.compression_mode(), m.compression(), modes.compression));
  ASSIGN_OR_RETURN(modes.partial_round,
                   ModeFromWire(m.partial_round_mode(), m.partial_round(), modes.partial_round));
  ASSIGN_OR_RETURN(modes.on_fall_behind,
                   ModeFromWire(m.on_fall_behind_mode(), m.on_fall_behind(), modes.on_fall_behind));
  return modes;
}

template <typename Msg>
void SetModes(const JobModes& modes, Msg* m) {
  m->set_sharding_mode(static_cast<ShardingMode>(WireNumber(modes.sharding)));
  m->set_compression_mode(static_cast<CompressionMode>(WireNumber(modes.compression)));
  m->set_partial_round_mode(static_cast<PartialRoundMode>(WireNumber(modes.partial_round)));
  m->set_on_fall_behind_mode(static_cast<OnFallBehindMode>(WireNumber(modes.on_fall_behind)));
  m->set_sharding(std::string(ModeName(modes.sharding)));
  m->set_compression(std::string(ModeName(modes.compression)));
  m->set_partial_round(std::string(ModeName(modes.partial_round)));
  m->set_on_fall_behind(std::string(ModeName(modes.on_fall_behind)));
}

#pragma GCC diagnostic pop

}  // namespace stoker::service
