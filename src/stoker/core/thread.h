// Every thread stoker starts goes through StartThread, so tests and diagnostics can count them.
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace stoker {

// Starts a thread named `name` (visible in top/gdb, truncated to 15 chars) running `body`.
// Thread-safe.
std::thread StartThread(std::string name, std::function<void()> body);

// Threads started by StartThread that have not yet returned. Thread-safe.
int LiveThreadCount();

}  // namespace stoker
