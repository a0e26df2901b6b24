// Inspecting the processes a test server started (for "nothing is left running" checks).
#pragma once

#include <string>
#include <vector>

namespace stoker::testing {

// The pids in STATE_DIR/run/*.pid and STATE_DIR/watcher.pid, with all their descendants.
// Thread-safe.
std::vector<int> ServerProcesses(const std::string& state_dir);

// True if `pid` exists and is not a zombie. Thread-safe.
bool IsRunning(int pid);

}  // namespace stoker::testing
