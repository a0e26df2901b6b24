// Fuzz target: arbitrary bytes as the dispatcher's journal file (WORK_DIR/journal.log), as a
// restarted dispatcher replays it: Journal::Open (which cuts a torn tail off), Journal::ReadAll,
// then DispatcherState::Apply of every update. A second open must find the file whole and read
// the same updates (restarts agree). Also every line whose text from its first '{' parses as JSON,
// whatever the framing and the lines around it, goes straight to Apply (so wrong types, missing
// fields, huge or negative numbers and unknown ids reach every update type).
//
// Nothing may crash or hit undefined behaviour, and the state must keep the invariants the
// dispatcher relies on after any sequence of updates, accepted or rejected:
//   - every job's dataset is registered (the dispatcher lists tasks with datasets().at()),
//   - every split named by `pending` or `last_lease` exists (GetSplit uses splits.at()),
//   - done_splits counts the splits marked done,
//   - a rejected update changes nothing.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "stoker/core/strings.h"
#include "stoker/service/common/journal.h"
#include "stoker/service/dispatcher/dispatcher_state.h"

namespace {

using stoker::service::DispatcherState;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "journal_replay_fuzzer: %s\n", what.c_str());
  std::abort();
}

// A work dir of this process, reused by every input (removed at exit).
const std::string& WorkDir() {
  static const std::string* dir = [] {
    std::string templ = (std::filesystem::temp_directory_path() / "journal_fuzz.XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) Fail("mkdtemp failed");
    std::atexit([] { std::filesystem::remove_all(WorkDir()); });
    return new std::string(templ);
  }();
  return *dir;
}

// Everything observable about the state, to check that a rejected update changed nothing.
std::string Summary(const DispatcherState& s) {
  std::string out =
      stoker::StrCat(s.next_job_id(), "/", s.next_worker_id(), "/", s.next_client_id(), ";");
  for (const auto& [fp, spec] : s.datasets()) out += stoker::StrCat("d ", fp, "=", spec, ";");
  for (const auto& [id, w] : s.workers()) out += stoker::StrCat("w ", id, "@", w.address, ";");
  for (const auto& [id, j] : s.jobs()) {
    out += stoker::StrCat("j ", id, " ", j.name, " ", j.fingerprint, " ", j.num_samples, " ",
                          ModeName(j.sharding), " ", ModeName(j.compression), " ", j.next_sample,
                          " ", j.done_splits, " ", j.error, ":");
    for (const auto& [sid, sp] : j.splits)
      out += stoker::StrCat(" s", sid, "[", sp.begin, ",", sp.end, ")", sp.worker_id, sp.done);
    for (int64_t p : j.pending) out += stoker::StrCat(" p", p);
    for (int64_t w : j.ended_workers) out += stoker::StrCat(" e", w);
    for (const auto& [w, sid] : j.last_lease) out += stoker::StrCat(" l", w, "=", sid);
    out += ";";
  }
  return out;
}

void CheckInvariants(const DispatcherState& s) {
  for (const auto& [id, job] : s.jobs()) {
    if (!s.datasets().count(job.fingerprint))
      Fail(stoker::StrCat("job ", id, " names an unregistered dataset"));
    int64_t done = 0;
    for (const auto& [sid, split] : job.splits) done += split.done ? 1 : 0;
    if (done != job.done_splits) Fail(stoker::StrCat("job ", id, " miscounts its done splits"));
    for (int64_t p : job.pending)
      if (!job.splits.count(p)) Fail(stoker::StrCat("job ", id, " has unknown pending split ", p));
    for (const auto& [w, sid] : job.last_lease)
      if (!job.splits.count(sid)) Fail(stoker::StrCat("job ", id, " last lease of unknown split"));
    (void)s.JobFinished(job);
    (void)s.FindJobByName(job.name);
    (void)s.next_split_id(id);
  }
}

void ApplyAll(DispatcherState* state, const nlohmann::json& update) {
  std::string before = Summary(*state);
  absl::Status st = state->Apply(update);
  if (!st.ok()) {
    if (st.message().empty()) Fail("a rejected update without a message");
    if (Summary(*state) != before) Fail("a rejected update changed the state: " + st.ToString());
  }
  CheckInvariants(*state);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string path = WorkDir() + "/journal.log";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  auto journal = stoker::service::Journal::Open(WorkDir());
  if (!journal.ok()) {
    if (!absl::IsDataLoss(journal.status()) || journal.status().message().empty())
      Fail("a damaged journal must be DataLoss with a message: " + journal.status().ToString());
  } else {
    auto updates = (*journal)->ReadAll();
    if (updates.ok()) {
      DispatcherState state;
      for (const nlohmann::json& u : *updates) ApplyAll(&state, u);
    } else if (updates.status().message().empty()) {
      Fail("an unreadable journal without a message");
    }
    journal->reset();
    // The restart after this one: the tail is gone, so the file is whole and reads the same.
    std::ifstream in(path, std::ios::binary);
    std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t valid_end = 0;
    auto payloads = stoker::service::Journal::ScanRecords(kept, &valid_end);
    if (valid_end != kept.size()) Fail("open left a damaged tail in the file");
    if (kept.size() > text.size() || text.substr(0, kept.size()) != kept)
      Fail("open changed the records it kept");
    auto again = stoker::service::Journal::Open(WorkDir());
    if (!again.ok()) Fail("the second open failed: " + again.status().ToString());
    auto updates_again = (*again)->ReadAll();
    if (updates.ok() != updates_again.ok() || (updates.ok() && *updates != *updates_again))
      Fail("two restarts read different updates");
  }

  // Every parseable line straight to Apply, skipping the ones that do not parse.
  DispatcherState state;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    size_t brace = text.find('{', pos);
    if (brace > nl) brace = nl;
    auto u = nlohmann::json::parse(text.begin() + brace, text.begin() + nl, nullptr, false);
    if (!u.is_discarded()) ApplyAll(&state, u);
    pos = nl + 1;
  }
  return 0;
}
