#include "stoker/testing/process_util.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "gtest/gtest.h"
#include "stoker/testing/script_server.h"

namespace stoker::testing {
namespace {

int ReadPid(const std::filesystem::path& path) {
  std::ifstream in(path);
  int pid = 0;
  return (in >> pid) ? pid : 0;
}

void AddWithDescendants(int pid, std::set<int>* pids) {
  if (pid <= 0 || !pids->insert(pid).second) return;
  std::error_code error;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", error)) {
    std::ifstream children(task.path() / "children");
    int child = 0;
    while (children >> child) AddWithDescendants(child, pids);
  }
}

}  // namespace

std::vector<int> ServerProcesses(const std::string& state_dir) {
  std::set<int> pids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/run", error)) {
    if (entry.path().extension() == ".pid") AddWithDescendants(ReadPid(entry.path()), &pids);
  }
  AddWithDescendants(ReadPid(state_dir + "/watcher.pid"), &pids);
  return {pids.begin(), pids.end()};
}

bool IsRunning(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, name, state;
  if (!(stat >> pid_field >> name >> state)) return false;
  return state != "Z";
}

void ExpectStopLeavesNothingRunning(ScriptServer& server, size_t min_processes) {
  std::vector<int> pids = ServerProcesses(server.state_dir());
  EXPECT_GE(pids.size(), min_processes);
  for (int pid : pids) EXPECT_TRUE(IsRunning(pid)) << pid;
  const std::string state_dir = server.state_dir();
  absl::Status stopped = server.Stop();
  ASSERT_TRUE(stopped.ok()) << stopped;
  for (int pid : pids) EXPECT_FALSE(IsRunning(pid)) << pid;
  EXPECT_FALSE(std::filesystem::exists(state_dir));
}

}  // namespace stoker::testing
