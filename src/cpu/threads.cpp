// The CPU backend's worker-thread limit (gdn/ops.h set_cpu_threads): set by the caller, or the
// CPUs this process may run on, read from its affinity mask at each call (it may change; taskset
// and container CPU sets shrink it, which std::thread::hardware_concurrency does not see).
#include <sched.h>

#include <atomic>
#include <thread>

#include "gdn/ops.h"

namespace gdn {
namespace {
std::atomic<int> g_cpu_threads{0};  // < 1: the affinity mask's CPUs
}  // namespace

void set_cpu_threads(int n) { g_cpu_threads.store(n < 1 ? 0 : n, std::memory_order_relaxed); }

int cpu_threads() {
  const int n = g_cpu_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace gdn
