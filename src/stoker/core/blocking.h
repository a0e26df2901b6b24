// Blocking on an asynchronous call: the one adapter behind every synchronous wrapper of a
// callback API in stoker (ObjectStore::Stat and Read, HttpTransport::SendSync,
// RangedReader::ReadRanges, ShardedDataset::ReadSamples, ...).
//
//   absl::StatusOr<ObjectInfo> info = Await<absl::StatusOr<ObjectInfo>>(
//       [&](auto done) { store.StatAsync(key, std::move(done)); });
//
// `start` is called once with a callback; the asynchronous call it starts must run that callback
// exactly once, on any thread (also on the caller's, before `start` returns). Await returns the
// value passed to it. Never call Await on the thread that runs the callback (for instance the
// HTTP transport's thread, inside another completion callback): it would wait forever.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "absl/synchronization/notification.h"

namespace stoker {

template <typename T, typename Start>
T Await(Start&& start) {
  // Shared with the callback, so that a callback still inside Notify() never touches freed state.
  struct State {
    absl::Notification ready;
    std::optional<T> value;
  };
  auto state = std::make_shared<State>();
  std::forward<Start>(start)([state](T value) {
    state->value.emplace(std::move(value));
    state->ready.Notify();
  });
  state->ready.WaitForNotification();
  return std::move(*state->value);
}

}  // namespace stoker
