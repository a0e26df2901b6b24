#include "stoker/core/thread.h"

#include <pthread.h>

#include <atomic>

namespace stoker {
namespace {
std::atomic<int> live_threads{0};
}  // namespace

std::thread StartThread(std::string name, std::function<void()> body) {
  live_threads.fetch_add(1);
  return std::thread([name = std::move(name), body = std::move(body)] {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    body();
    live_threads.fetch_sub(1);
  });
}

int LiveThreadCount() { return live_threads.load(); }

}  // namespace stoker
