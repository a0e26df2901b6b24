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

class ScriptServer;
// The lifecycle check every script-driven test server passes: at least `min_processes` of its
// processes run, and after server.Stop() none does and its state folder is gone (gtest
// expectations).
void ExpectStopLeavesNothingRunning(ScriptServer& server, size_t min_processes);

}  // namespace stoker::testing
