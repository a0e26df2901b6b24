// The dispatcher's rule that no reply shows a state the journal does not hold yet
// (docs/protocol.md, "Durability"), shared by its RPC files: every RPC declares a SyncBeforeReply
// first, so that, after the RPC released the mutex and before the reply goes out, the journal is
// synced up to what was written so far; a journal that fails stops the dispatcher
// (StopOnJournalFailure), so that a restart replays a consistent state.
#pragma once

#include "absl/status/status.h"
#include "stoker/service/common/journal.h"

namespace stoker::service::dispatcher_internal {

// The in-memory state is ahead of the journal: logs why and aborts the process (clients and
// workers retry until a restarted dispatcher has replayed the journal).
[[noreturn]] void StopOnJournalFailure(const absl::Status& s);

// Declared first in every RPC, so that it runs after the RPC released the mutex and before the
// reply goes out: waits until everything written to the journal so far is on disk. `journal`
// null: no journal (nothing to wait for).
struct SyncBeforeReply {
  Journal* journal;
  ~SyncBeforeReply() {
    if (journal == nullptr) return;
    absl::Status s = journal->SyncTo(journal->written());
    if (!s.ok()) StopOnJournalFailure(s);
  }
};

}  // namespace stoker::service::dispatcher_internal
