// The service's modes (include/stoker/service/consumer.h): one table of spellings per mode, read by
// ParseMode (flags, Python arguments, the journal, a peer's deprecated string field) and written
// by ModeName (logs, status page, /metrics, the journal).
#include <string>

#include "stoker/core/strings.h"
#include "stoker/service/common/element_codec.h"
#include "stoker/service/consumer.h"

namespace stoker::service {
namespace {

template <typename Mode>
struct Spelling {
  Mode mode;
  std::string_view name;
};

template <typename Mode>
struct Table;  // field: the mode's name; spellings: every value, the default first

template <>
struct Table<Sharding> {
  static constexpr std::string_view field = "sharding";
  static constexpr Spelling<Sharding> spellings[] = {{Sharding::kDynamic, "dynamic"},
                                                     {Sharding::kOff, "off"}};
};
template <>
struct Table<PartialRound> {
  static constexpr std::string_view field = "partial_round";
  static constexpr Spelling<PartialRound> spellings[] = {{PartialRound::kDrop, "drop"},
                                                         {PartialRound::kPad, "pad"}};
};
template <>
struct Table<OnFallBehind> {
  static constexpr std::string_view field = "on_fall_behind";
  static constexpr Spelling<OnFallBehind> spellings[] = {{OnFallBehind::kRecompute, "recompute"},
                                                         {OnFallBehind::kSkip, "skip"}};
};
template <>
struct Table<Compression> {
  static constexpr std::string_view field = "compression";
  static constexpr Spelling<Compression> spellings[] = {
      {Compression::kNone, "none"}, {Compression::kZstd, "zstd"}, {Compression::kLz4, "lz4"}};
};

// "'dynamic' or 'off'", "'none', 'zstd' or 'lz4'".
template <typename Mode>
std::string Allowed() {
  std::string out;
  const auto& all = Table<Mode>::spellings;
  for (size_t i = 0; i < std::size(all); ++i) {
    if (i > 0) out += i + 1 == std::size(all) ? " or " : ", ";
    out += StrCat("'", all[i].name, "'");
  }
  return out;
}

template <typename Mode>
std::string_view Name(Mode mode) {
  for (const auto& s : Table<Mode>::spellings)
    if (s.mode == mode) return s.name;
  return "?";  // not a value of the enum (CheckMode refuses it)
}

}  // namespace

template <typename Mode>
absl::StatusOr<Mode> ParseMode(std::string_view text) {
  for (const auto& s : Table<Mode>::spellings)
    if (s.name == text) return s.mode;
  return absl::InvalidArgumentError(
      StrCat("unknown ", Table<Mode>::field, " '", text, "': use ", Allowed<Mode>()));
}

template <typename Mode>
absl::Status CheckMode(Mode mode) {
  for (const auto& s : Table<Mode>::spellings)
    if (s.mode == mode) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("unknown ", Table<Mode>::field, " ",
                                           static_cast<int>(mode), ": use ", Allowed<Mode>()));
}

template <typename Mode>
std::string_view ModeField() {
  return Table<Mode>::field;
}

template <typename Mode>
std::vector<std::string_view> ModeNames() {
  std::vector<std::string_view> names;
  for (const auto& s : Table<Mode>::spellings) names.push_back(s.name);
  return names;
}

std::string_view ModeName(Sharding mode) { return Name(mode); }
std::string_view ModeName(PartialRound mode) { return Name(mode); }
std::string_view ModeName(OnFallBehind mode) { return Name(mode); }
std::string_view ModeName(Compression mode) { return Name(mode); }

#define STOKER_SERVICE_MODE(Mode)                                  \
  template absl::StatusOr<Mode> ParseMode<Mode>(std::string_view); \
  template absl::Status CheckMode<Mode>(Mode);                     \
  template std::string_view ModeField<Mode>();                     \
  template std::vector<std::string_view> ModeNames<Mode>();
STOKER_SERVICE_MODE(Sharding)
STOKER_SERVICE_MODE(PartialRound)
STOKER_SERVICE_MODE(OnFallBehind)
STOKER_SERVICE_MODE(Compression)
#undef STOKER_SERVICE_MODE

}  // namespace stoker::service
