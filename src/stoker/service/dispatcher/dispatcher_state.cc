#include "stoker/service/dispatcher/dispatcher_state.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::service {

using nlohmann::json;

const DispatcherState::Job* DispatcherState::FindJob(int64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

std::optional<int64_t> DispatcherState::FindJobByName(const std::string& name) const {
  if (name.empty()) return std::nullopt;
  for (const auto& [id, job] : jobs_)
    if (job.name == name && job.ended.empty() && job.error.empty() && !JobFinished(job)) return id;
  return std::nullopt;
}

std::string DispatcherState::Job::label() const {
  if (!name.empty()) return name;
  if (!display_name.empty()) return display_name;
  return StrCat("job ", id);
}

int64_t DispatcherState::Job::epochs_done(int64_t client_id) const {
  if (num_samples <= 0) return first_epoch;
  // Split ids follow positions, so the first split not acknowledged bounds what is complete.
  int64_t complete = next_sample;
  for (const auto& [id, split] : splits) {
    if (!split.done && !(cross_trainer_cache && split.acked_by.count(client_id))) {
      complete = std::min(complete, split.begin);
      break;
    }
  }
  return first_epoch + complete / num_samples;
}

bool DispatcherState::Job::FinishedFor(int64_t client_id) const {
  if (num_samples <= 0 || next_sample < positions()) return false;
  for (const auto& [id, split] : splits)
    if (!split.done && !split.acked_by.count(client_id)) return false;
  return true;
}

int64_t DispatcherState::Job::SkipGaps(int64_t p) const {
  if (!resumed || p >= num_samples) return p;
  for (const ResumePiece& piece : resume)
    if (p < piece.end) return std::max(p, piece.begin);
  return num_samples;  // the rest of the first epoch was delivered before
}

const DispatcherState::ResumePiece* DispatcherState::Job::PieceAt(int64_t p) const {
  if (!resumed || p >= num_samples) return nullptr;
  for (const ResumePiece& piece : resume)
    if (p >= piece.begin && p < piece.end) return &piece;
  return nullptr;
}

int64_t DispatcherState::next_split_id(int64_t job_id) const {
  const Job* job = FindJob(job_id);
  return job == nullptr || job->splits.empty() ? 0 : job->splits.rbegin()->first + 1;
}

bool DispatcherState::JobFinished(const Job& job) const {
  if (job.sharding == Sharding::kOff) {
    if (job.ended_workers.empty()) return false;
    for (const auto& [id, w] : workers_)
      if (!job.ended_workers.count(id)) return false;
    return true;
  }
  return job.num_samples > 0 && job.next_sample >= job.positions() &&
         job.done_splits == static_cast<int64_t>(job.splits.size());
}

namespace {

// At most n bytes of s, not cutting a UTF-8 sequence (messages may end up in JSON).
std::string Clip(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "...";
}

// The update for an error message: its type and top-level scalar fields (no recursion into nested
// values, so a hostile journal line cannot exhaust the stack or the log).
std::string Describe(const json& u) {
  if (!u.is_object()) return StrCat("a JSON ", u.type_name(), " (not an object)");
  std::string out = "{";
  for (const auto& [key, value] : u.items()) {
    if (out.size() > 300) return out + " ...}";
    std::string v = value.is_primitive()
                        ? value.dump(-1, ' ', false, json::error_handler_t::replace)
                        : StrCat("<", value.type_name(), ">");
    out += StrCat(out.size() > 1 ? ", " : "", Clip(key, 40), ": ", Clip(v, 80));
  }
  return out + "}";
}

absl::Status Malformed(const json& u, std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("malformed dispatcher update ", Describe(u), ": ", what));
}

// Only such values convert to int64_t: a float out of range would be undefined behaviour, a string
// an exception, an unsigned number above INT64_MAX a silent wrap.
bool IsInt64(const json& v) {
  return v.is_number_integer() &&
         !(v.is_number_unsigned() &&
           v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

// A required integer field.
absl::StatusOr<int64_t> GetInt(const json& u, const char* key) {
  auto it = u.find(key);
  if (it == u.end()) return Malformed(u, StrCat("no '", key, "'"));
  if (!IsInt64(*it)) return Malformed(u, StrCat("'", key, "' is not a 64-bit integer"));
  return it->get<int64_t>();
}

absl::StatusOr<int64_t> GetId(const json& u, const char* key) {
  ASSIGN_OR_RETURN(int64_t id, GetInt(u, key));
  if (id <= 0) return Malformed(u, StrCat("'", key, "' must be positive"));
  return id;
}

// A string field; `fallback` when it is absent (nullopt: required).
absl::StatusOr<std::string> GetString(const json& u, const char* key,
                                      std::optional<std::string> fallback = std::nullopt) {
  auto it = u.find(key);
  if (it == u.end()) {
    if (fallback) return *fallback;
    return Malformed(u, StrCat("no '", key, "'"));
  }
  if (!it->is_string()) return Malformed(u, StrCat("'", key, "' is not a string"));
  return it->get<std::string>();
}

// A mode, spelled as ModeName writes it; `fallback` (the default) when absent.
template <typename Mode>
absl::StatusOr<Mode> GetMode(const json& u, const char* key, Mode fallback) {
  if (!u.contains(key)) return fallback;
  ASSIGN_OR_RETURN(std::string text, GetString(u, key));
  absl::StatusOr<Mode> mode = ParseMode<Mode>(text);
  if (!mode.ok()) return Malformed(u, std::string(mode.status().message()));
  return mode;
}

// Coordinated reads: every consumer acknowledged its part of the split, or left.
bool CoordinatedDone(const DispatcherState::Job& job, const DispatcherState::SplitInfo& split) {
  for (int64_t i = 0; i < job.num_consumers; ++i)
    if (!split.acked_by.count(i) && !job.departed.count(i)) return false;
  return true;
}

// Cross-trainer cache: every live trainer acknowledged the split.
bool CrossTrainerDone(const DispatcherState::Job& job, const DispatcherState::SplitInfo& split) {
  if (job.clients.empty()) return false;
  for (int64_t c : job.clients)
    if (!split.acked_by.count(c)) return false;
  return true;
}

// Splits not done that every live consumer has acknowledged (after one left) become done.
void MarkAcknowledgedDone(DispatcherState::Job& j) {
  for (auto& [split_id, split] : j.splits) {
    if (split.done) continue;
    if (j.num_consumers > 0 ? CoordinatedDone(j, split) : CrossTrainerDone(j, split)) {
      split.done = true;
      ++j.done_splits;
      std::erase(j.pending, split_id);
    }
  }
}

}  // namespace

DispatcherState::Job* DispatcherState::MutableJob(const json& update) {
  absl::StatusOr<int64_t> id = GetInt(update, "job_id");
  if (!id.ok()) return nullptr;
  auto it = jobs_.find(*id);
  return it == jobs_.end() ? nullptr : &it->second;
}

// Every field is read and checked before anything changes, so a rejected update leaves the state
// as it was, and the state keeps the invariants the dispatcher relies on: every job's dataset is
// registered, and every split named by `pending` or `last_lease` exists.
absl::Status DispatcherState::Apply(const json& u) {
  if (!u.is_object() || !u.contains("type") || !u["type"].is_string())
    return absl::InvalidArgumentError(StrCat("dispatcher update without a type: ", Describe(u)));
  try {
    const std::string type = u["type"];
    if (type == "register_dataset") {
      ASSIGN_OR_RETURN(std::string fingerprint, GetString(u, "fingerprint"));
      ASSIGN_OR_RETURN(std::string spec, GetString(u, "spec"));
      datasets_[fingerprint] = std::move(spec);
      return absl::OkStatus();
    }
    if (type == "create_job") {
      Job job;
      ASSIGN_OR_RETURN(job.id, GetId(u, "job_id"));
      ASSIGN_OR_RETURN(job.name, GetString(u, "name", ""));
      ASSIGN_OR_RETURN(job.fingerprint, GetString(u, "fingerprint"));
      ASSIGN_OR_RETURN(job.num_samples, GetInt(u, "num_samples"));
      ASSIGN_OR_RETURN(job.sharding, GetMode(u, "sharding", job.sharding));
      ASSIGN_OR_RETURN(job.compression, GetMode(u, "compression", job.compression));
      if (u.contains("num_epochs")) {
        ASSIGN_OR_RETURN(job.num_epochs, GetInt(u, "num_epochs"));
      }
      if (u.contains("first_epoch")) {
        ASSIGN_OR_RETURN(job.first_epoch, GetInt(u, "first_epoch"));
      }
      if (u.contains("num_consumers")) {
        ASSIGN_OR_RETURN(job.num_consumers, GetInt(u, "num_consumers"));
      }
      ASSIGN_OR_RETURN(job.partial_round, GetMode(u, "partial_round", job.partial_round));
      if (u.contains("deterministic")) {
        if (!u["deterministic"].is_boolean()) return Malformed(u, "'deterministic' is not a bool");
        job.deterministic = u["deterministic"].get<bool>();
      }
      if (u.contains("cross_trainer_cache")) {
        if (!u["cross_trainer_cache"].is_boolean())
          return Malformed(u, "'cross_trainer_cache' is not a bool");
        job.cross_trainer_cache = u["cross_trainer_cache"].get<bool>();
      }
      ASSIGN_OR_RETURN(job.on_fall_behind, GetMode(u, "on_fall_behind", job.on_fall_behind));
      ASSIGN_OR_RETURN(job.display_name, GetString(u, "display_name", ""));
      if (u.contains("created")) {
        if (!u["created"].is_number() || !std::isfinite(u["created"].get<double>()) ||
            u["created"].get<double>() < 0)
          return Malformed(u, "'created' is not a time in seconds");
        job.created = u["created"].get<double>();
      }
      if (u.contains("open_ended")) {
        if (!u["open_ended"].is_boolean()) return Malformed(u, "'open_ended' is not a bool");
        job.open_ended = u["open_ended"].get<bool>();
      }
      if (job.cross_trainer_cache && (job.num_consumers > 0 || job.sharding != Sharding::kDynamic))
        return Malformed(u, "'cross_trainer_cache' needs dynamic sharding and no num_consumers");
      if (job.first_epoch < 0 || job.first_epoch > kMaxEpochs)
        return Malformed(u, StrCat("'first_epoch' must be 0 .. ", kMaxEpochs));
      if (job.num_consumers < 0 || job.num_consumers > kMaxConsumers)
        return Malformed(u, StrCat("'num_consumers' must be 0 .. ", kMaxConsumers));
      if (job.num_epochs < 1 || job.num_epochs > kMaxEpochs)
        return Malformed(u, StrCat("'num_epochs' must be 1 .. ", kMaxEpochs));
      if (job.num_samples < 0 || job.num_samples > (int64_t{1} << 62) / job.num_epochs)
        return Malformed(u, "'num_samples' times 'num_epochs' must be 0 .. 2^62");
      if (jobs_.count(job.id)) return Malformed(u, "the job exists already");
      if (!datasets_.count(job.fingerprint)) return Malformed(u, "its dataset is not registered");
      if (u.contains("resume")) {
        const nlohmann::json& r = u["resume"];
        if (!r.is_array()) return Malformed(u, "'resume' is not an array");
        if (job.sharding != Sharding::kDynamic || job.num_samples <= 0)
          return Malformed(u, "'resume' needs dynamic sharding and num_samples");
        int64_t last_end = 0;
        for (const nlohmann::json& p : r) {
          if (!p.is_array() || p.size() != 3 || !p[0].is_number_integer() ||
              !p[1].is_number_integer() || !p[2].is_boolean())
            return Malformed(u, "a 'resume' piece is not [begin, end, exact]");
          ResumePiece piece{p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<bool>()};
          if (piece.begin < last_end || piece.end <= piece.begin || piece.end > job.num_samples)
            return Malformed(u, "'resume' pieces must be sorted, disjoint, within the epoch");
          last_end = piece.end;
          job.resume.push_back(piece);
        }
        job.resumed = true;
        job.next_sample = job.SkipGaps(0);
      }
      last_job_id_ = std::max(last_job_id_, job.id);
      jobs_[job.id] = std::move(job);
      return absl::OkStatus();
    }
    if (type == "register_worker") {
      ASSIGN_OR_RETURN(int64_t id, GetId(u, "worker_id"));
      ASSIGN_OR_RETURN(std::string address, GetString(u, "address"));
      workers_[id] = Worker{id, std::move(address)};
      last_worker_id_ = std::max(last_worker_id_, id);
      return absl::OkStatus();
    }
    if (type == "remove_worker") {
      ASSIGN_OR_RETURN(int64_t id, GetId(u, "worker_id"));
      workers_.erase(id);
      for (auto& [job_id, job] : jobs_) {
        job.last_lease.erase(id);
        for (auto& [split_id, split] : job.splits) {
          if (split.worker_id == id && !split.done) {
            split.worker_id = 0;
            job.pending.push_back(split_id);
          }
        }
      }
      return absl::OkStatus();
    }
    if (type == "register_client") {
      Client c;
      ASSIGN_OR_RETURN(c.id, GetId(u, "client_id"));
      if (u.contains("consumer_index")) {
        ASSIGN_OR_RETURN(c.consumer_index, GetInt(u, "consumer_index"));
      }
      ASSIGN_OR_RETURN(c.trainer_id, GetString(u, "trainer_id", ""));
      ASSIGN_OR_RETURN(c.registration_id, GetString(u, "registration_id", ""));
      // Journals written before clients were tracked name no job: only the id counts then.
      if (u.contains("job_id")) {
        ASSIGN_OR_RETURN(c.job_id, GetInt(u, "job_id"));
        Job* job = MutableJob(u);
        if (job == nullptr)
          return absl::NotFoundError(StrCat("update for an unknown job: ", Describe(u)));
        if (clients_.count(c.id)) return Malformed(u, "the client exists already");
        if (job->num_consumers > 0 &&
            (c.consumer_index < 0 || c.consumer_index >= job->num_consumers))
          return Malformed(u, "'consumer_index' out of the job's range");
        job->clients.insert(c.id);
        job->ever_had_client = true;
        if (job->cross_trainer_cache) {
          // The new trainer reads the job from its start: what it lacks is not done any more.
          for (auto& [split_id, split] : job->splits) {
            if (!split.done) continue;
            split.done = false;
            --job->done_splits;
            if (!workers_.count(split.worker_id)) {  // its worker left: run it again
              split.worker_id = 0;
              job->pending.push_back(split_id);
            }
          }
        }
        clients_[c.id] = c;
      }
      last_client_id_ = std::max(last_client_id_, c.id);
      return absl::OkStatus();
    }
    if (type == "remove_client") {
      ASSIGN_OR_RETURN(int64_t id, GetId(u, "client_id"));
      auto it = clients_.find(id);
      if (it == clients_.end()) return absl::NotFoundError(StrCat("no client: ", Describe(u)));
      auto job = jobs_.find(it->second.job_id);
      if (job != jobs_.end()) {
        Job& j = job->second;
        j.clients.erase(id);
        j.removed_clients.push_back(id);
        if (j.num_consumers > 0) j.departed.insert(it->second.consumer_index);
        if (j.num_consumers > 0 || j.cross_trainer_cache) MarkAcknowledgedDone(j);
      }
      clients_.erase(it);
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(GetInt(u, "job_id").status());
    Job* job = MutableJob(u);
    if (job == nullptr)
      return absl::NotFoundError(StrCat("update for an unknown job: ", Describe(u)));
    if (type == "create_split") {
      ASSIGN_OR_RETURN(int64_t split_id, GetInt(u, "split_id"));
      SplitInfo s;
      ASSIGN_OR_RETURN(s.begin, GetInt(u, "begin"));
      ASSIGN_OR_RETURN(s.end, GetInt(u, "end"));
      ASSIGN_OR_RETURN(s.worker_id, GetId(u, "worker_id"));
      if (s.begin != job->next_sample || s.end <= s.begin || s.end > job->positions())
        return absl::InvalidArgumentError(StrCat("split out of order: ", Describe(u)));
      if (job->num_samples <= 0) return Malformed(u, "the job's size is not known yet");
      if (s.begin / job->num_samples != (s.end - 1) / job->num_samples)
        return Malformed(u, "the split spans two epochs");
      if (const ResumePiece* piece = job->PieceAt(s.begin);
          piece != nullptr && (s.end > piece->end ||
                               (piece->exact && (s.begin != piece->begin || s.end != piece->end))))
        return Malformed(u, "the split does not follow the job's resume pieces");
      if (job->splits.count(split_id)) return Malformed(u, "the split exists already");
      job->next_sample = job->SkipGaps(s.end);
      job->last_lease[s.worker_id] = split_id;
      job->splits[split_id] = s;
      return absl::OkStatus();
    }
    if (type == "lease_split") {
      ASSIGN_OR_RETURN(int64_t split_id, GetInt(u, "split_id"));
      ASSIGN_OR_RETURN(int64_t worker_id, GetId(u, "worker_id"));
      auto it = job->splits.find(split_id);
      if (it == job->splits.end()) return absl::NotFoundError(StrCat("no split: ", Describe(u)));
      it->second.worker_id = worker_id;
      job->last_lease[worker_id] = split_id;
      std::erase(job->pending, split_id);
      return absl::OkStatus();
    }
    if (type == "set_job_size") {
      ASSIGN_OR_RETURN(int64_t n, GetInt(u, "num_samples"));
      if (job->num_samples != 0) return Malformed(u, "the job's size is known already");
      if (n <= 0 || n > (int64_t{1} << 62) / job->num_epochs)
        return Malformed(u, "'num_samples' times the job's epochs must be 1 .. 2^62");
      job->num_samples = n;
      return absl::OkStatus();
    }
    if (type == "end_job") {
      ASSIGN_OR_RETURN(std::string reason, GetString(u, "reason"));
      job->ended = reason.empty() ? "ended" : reason;
      return absl::OkStatus();
    }
    if (type == "requeue_splits" || type == "ack_splits") {
      auto ids = u.find("split_ids");
      if (ids == u.end() || !ids->is_array()) return Malformed(u, "'split_ids' is not an array");
      for (const json& id : *ids)
        if (!IsInt64(id))
          return Malformed(u, "'split_ids' holds a value that is not a 64-bit integer");
      int64_t consumer = 0;
      if (u.contains("consumer_index")) {
        ASSIGN_OR_RETURN(consumer, GetInt(u, "consumer_index"));
      }
      int64_t client = 0;
      if (job->cross_trainer_cache) {
        ASSIGN_OR_RETURN(client, GetId(u, "client_id"));
      }
      for (const json& id : *ids) {
        int64_t split_id = id.get<int64_t>();
        auto it = job->splits.find(split_id);
        if (it == job->splits.end() || it->second.done) continue;  // unknown or repeated ack
        if (type == "requeue_splits") {
          if (it->second.worker_id == 0) continue;  // pending already
          it->second.worker_id = 0;
          job->pending.push_back(split_id);
          continue;
        }
        if (job->num_consumers > 0) {
          it->second.acked_by.insert(consumer);
          if (!CoordinatedDone(*job, it->second)) continue;
        } else if (job->cross_trainer_cache) {
          it->second.acked_by.insert(client);
          if (!CrossTrainerDone(*job, it->second)) continue;
        }
        it->second.done = true;
        ++job->done_splits;
        std::erase(job->pending, split_id);
      }
      return absl::OkStatus();
    }
    if (type == "worker_ended") {
      ASSIGN_OR_RETURN(int64_t worker_id, GetInt(u, "worker_id"));
      job->ended_workers.insert(worker_id);
      return absl::OkStatus();
    }
    if (type == "job_error") {
      ASSIGN_OR_RETURN(job->error, GetString(u, "message"));
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(StrCat("unknown dispatcher update type '", type, "'"));
  } catch (const json::exception& e) {
    return Malformed(u, e.what());
  }
}

}  // namespace stoker::service
