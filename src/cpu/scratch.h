// src/cpu/scratch.h — the CPU backend's scratch and its parallel loop. An op measures what one work
// item needs (a layout function run on a measuring Arena), takes that once per worker thread before
// its first write (docs/contract.md §5: a failed allocation then changes nothing) and hands each
// item its worker's arena; nothing is allocated once writing has begun.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "gdn/ops.h"

namespace gdn::cpu {

// A bump allocator over one worker's buffer, reset for every item. Without a buffer it measures:
// the same layout function run on a measuring arena gives the bytes it takes from a real one.
// Buffers are 64-byte aligned and uninitialised.
class Arena {
 public:
  Arena() = default;  // measuring
  Arena(char* base, size_t capacity) : base_(base), cap_(capacity) {}

  template <typename T>
  T* take(int64_t count) {
    const size_t at = (used_ + 63) & ~size_t{63};
    size_t bytes = 0;
    // Sizes past the address space can only be measured (before any write): out of memory.
    if (at < used_ || __builtin_mul_overflow(sizeof(T), static_cast<size_t>(std::max<int64_t>(count, 0)), &bytes) ||
        __builtin_add_overflow(at, bytes, &used_))
      throw std::bad_alloc();
    if (!base_) return nullptr;
    // A layout that takes more than it measured is a bug of the library, never of the input.
    if (used_ > cap_) throw std::logic_error("CPU scratch: an item took more than its measured layout");
    return reinterpret_cast<T*>(base_ + at);
  }
  void reset() { used_ = 0; }
  size_t used() const { return used_; }

 private:
  char* base_ = nullptr;
  size_t cap_ = 0, used_ = 0;
};

// Elements a * b * c, or std::bad_alloc where the product overflows (a measured size).
inline int64_t elems(int64_t a, int64_t b, int64_t c = 1) {
  int64_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) throw std::bad_alloc();
  return abc;
}

// What an op's work items need: their count and the bytes of one item's layout.
struct ScratchNeed {
  int64_t items = 0;
  size_t bytes = 0;
  void add(const ScratchNeed& o) {  // two phases of one op, run one after the other
    items = std::max(items, o.items);
    bytes = std::max(bytes, o.bytes);
  }
};

// Worker threads for n items: gdn::cpu_threads() (threads.cpp), at most n, at least 1.
inline int64_t workers_for(int64_t n) { return std::max<int64_t>(1, std::min<int64_t>(gdn::cpu_threads(), n)); }

// The arenas of `workers` threads, `bytes` each, allocated here (std::bad_alloc before any write).
class Scratch {
  static size_t round_up(size_t b) {
    if (b > SIZE_MAX - 63) throw std::bad_alloc();
    return (b + 63) & ~size_t{63};
  }
  static char* allocate(size_t stride, int64_t workers) {
    size_t total = 0;
    if (!stride) return nullptr;
    if (__builtin_mul_overflow(stride, static_cast<size_t>(workers), &total) || total > SIZE_MAX - 64)
      throw std::bad_alloc();
    return new char[total + 64];
  }

 public:
  Scratch(int64_t workers, size_t bytes)
      : workers_(std::max<int64_t>(workers, 1)), stride_(round_up(bytes)), buf_(allocate(stride_, workers_)) {}
  explicit Scratch(const ScratchNeed& need) : Scratch(workers_for(need.items), need.bytes) {}
  int64_t workers() const { return workers_; }
  Arena arena(int64_t w) {
    if (!buf_) return Arena(reinterpret_cast<char*>(&empty_), 0);
    char* base = buf_.get() + ((64 - reinterpret_cast<uintptr_t>(buf_.get()) % 64) % 64);
    return Arena(base + static_cast<size_t>(w) * stride_, stride_);
  }

 private:
  int64_t workers_;
  size_t stride_;
  std::unique_ptr<char[]> buf_;
  alignas(64) char empty_ = 0;
};

// Runs f(i, arena) for i in [0, n) on up to sc.workers() threads, each item with its worker's arena,
// reset. Items must be independent, so the result does not depend on the schedule. Threads that
// cannot be started leave their items to the others; an exception of an item (a bug) stops the
// loop and is rethrown once every started thread has joined.
template <typename F>
void parallel_for(int64_t n, Scratch& sc, F f) {
  const int64_t nthreads = std::max<int64_t>(1, std::min(sc.workers(), n));  // sc: workers_for its items
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto worker = [&](int64_t w) {
    Arena ar = sc.arena(w);
    try {
      for (int64_t i = next++; i < n && !failed.load(); i = next++) {
        ar.reset();
        f(i, ar);
      }
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  try {
    pool.reserve(static_cast<size_t>(nthreads));
    for (int64_t t = 1; t < nthreads; ++t) pool.emplace_back(worker, t);
  } catch (const std::exception&) {  // std::system_error, std::bad_alloc: fewer threads
  }
  worker(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace gdn::cpu
