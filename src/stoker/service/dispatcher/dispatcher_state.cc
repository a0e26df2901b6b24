#include "stoker/service/dispatcher/dispatcher_state.h"

#include <algorithm>

#include "stoker/core/strings.h"

namespace stoker::service {

using nlohmann::json;

const DispatcherState::Job* DispatcherState::FindJob(int64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

std::optional<int64_t> DispatcherState::FindJobByName(const std::string& name) const {
  for (const auto& [id, job] : jobs_)
    if (!name.empty() && job.name == name) return id;
  return std::nullopt;
}

int64_t DispatcherState::next_split_id(int64_t job_id) const {
  const Job* job = FindJob(job_id);
  return job == nullptr || job->splits.empty() ? 0 : job->splits.rbegin()->first + 1;
}

bool DispatcherState::JobFinished(const Job& job) const {
  if (job.sharding == "off") {
    if (job.ended_workers.empty()) return false;
    for (const auto& [id, w] : workers_)
      if (!job.ended_workers.count(id)) return false;
    return true;
  }
  return job.next_sample >= job.num_samples &&
         job.done_splits == static_cast<int64_t>(job.splits.size());
}

DispatcherState::Job* DispatcherState::MutableJob(const json& update) {
  auto it = jobs_.find(update.value("job_id", int64_t{0}));
  return it == jobs_.end() ? nullptr : &it->second;
}

absl::Status DispatcherState::Apply(const json& u) {
  if (!u.is_object() || !u.contains("type") || !u["type"].is_string())
    return absl::InvalidArgumentError(StrCat("dispatcher update without a type: ", u.dump()));
  try {
    const std::string type = u["type"];
    if (type == "register_dataset") {
      datasets_[u.at("fingerprint")] = u.at("spec");
      return absl::OkStatus();
    }
    if (type == "create_job") {
      Job job;
      job.id = u.at("job_id");
      job.name = u.value("name", "");
      job.fingerprint = u.at("fingerprint");
      job.num_samples = u.at("num_samples");
      job.sharding = u.value("sharding", "dynamic");
      job.compression = u.value("compression", "none");
      last_job_id_ = std::max(last_job_id_, job.id);
      jobs_[job.id] = std::move(job);
      return absl::OkStatus();
    }
    if (type == "register_worker") {
      int64_t id = u.at("worker_id");
      workers_[id] = Worker{id, u.at("address")};
      last_worker_id_ = std::max(last_worker_id_, id);
      return absl::OkStatus();
    }
    if (type == "remove_worker") {
      int64_t id = u.at("worker_id");
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
      last_client_id_ = std::max(last_client_id_, u.at("client_id").get<int64_t>());
      return absl::OkStatus();
    }
    Job* job = MutableJob(u);
    if (job == nullptr) return absl::NotFoundError(StrCat("update for an unknown job: ", u.dump()));
    if (type == "create_split") {
      SplitInfo s{u.at("begin"), u.at("end"), u.at("worker_id"), false};
      if (s.begin != job->next_sample || s.end <= s.begin || s.end > job->num_samples)
        return absl::InvalidArgumentError(StrCat("split out of order: ", u.dump()));
      job->next_sample = s.end;
      job->last_lease[s.worker_id] = u.at("split_id");
      job->splits[u.at("split_id")] = s;
      return absl::OkStatus();
    }
    if (type == "lease_split") {
      int64_t split_id = u.at("split_id");
      auto it = job->splits.find(split_id);
      if (it == job->splits.end()) return absl::NotFoundError(StrCat("no split: ", u.dump()));
      it->second.worker_id = u.at("worker_id");
      job->last_lease[it->second.worker_id] = split_id;
      std::erase(job->pending, split_id);
      return absl::OkStatus();
    }
    if (type == "ack_splits") {
      for (int64_t split_id : u.at("split_ids")) {
        auto it = job->splits.find(split_id);
        if (it == job->splits.end() || it->second.done) continue;  // unknown or repeated ack
        it->second.done = true;
        ++job->done_splits;
        std::erase(job->pending, split_id);
      }
      return absl::OkStatus();
    }
    if (type == "worker_ended") {
      job->ended_workers.insert(u.at("worker_id").get<int64_t>());
      return absl::OkStatus();
    }
    if (type == "job_error") {
      job->error = u.at("message");
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(StrCat("unknown dispatcher update type '", type, "'"));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat("malformed dispatcher update ", u.dump(), ": ", e.what()));
  }
}

}  // namespace stoker::service
