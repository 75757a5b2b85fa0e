// tests/support/rlimit.h — a child process's data segment limited (RLIMIT_DATA) to what it uses plus
// a margin, for the tests of calls that fail on an allocation (docs/contract.md §5). Linux only; not
// under AddressSanitizer (its shadow mappings count against the limit). Test code only.
#pragma once
#include <sys/resource.h>

#include <cstdint>
#include <fstream>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#define GDN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GDN_TEST_ASAN 1
#endif
#endif

namespace gdn::prop {

// VmData of this process in bytes (0 if unknown).
inline int64_t data_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmData:", 0) == 0) return std::stoll(line.substr(7)) * 1024;  // kB
  return 0;
}

// Limits the data segment to what it is now plus `margin` bytes; false if that is not possible.
inline bool limit_data(int64_t margin) {
  const int64_t now = data_bytes();
  if (now <= 0) return false;
  rlimit r{};
  r.rlim_cur = r.rlim_max = static_cast<rlim_t>(now + margin);
  return setrlimit(RLIMIT_DATA, &r) == 0;
}

#ifdef GDN_TEST_ASAN
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

}  // namespace gdn::prop

#define GDN_SKIP_IF_NO_RLIMIT()                                                                             \
  do {                                                                                                      \
    if (::gdn::prop::kAsan) GTEST_SKIP() << "RLIMIT_DATA cases do not run under AddressSanitizer";          \
    if (::gdn::prop::data_bytes() <= 0) GTEST_SKIP() << "/proc/self/status has no VmData (not Linux)";      \
  } while (0)
