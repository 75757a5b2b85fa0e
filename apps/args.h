// Strict parsing of the command-line tool's numbers: the whole string, in range, finite. Junk,
// overflow, NaN and out-of-range values are refused (the caller prints one line and exits 2).
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace gdn::cli {

inline bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end || errno == ERANGE || v < lo || v > hi) return false;
  *out = v;
  return true;
}

inline bool parse_number(const std::string& s, double lo, double hi, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (*end || errno == ERANGE || !std::isfinite(v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace gdn::cli
