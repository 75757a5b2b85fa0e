// gdn/status.h — errors are values: every entry point returns a Status.
#pragma once
#include <string>
#include <utility>

namespace gdn {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }
  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  Status(std::string m, bool failed) : message_(std::move(m)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

#define GDN_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::gdn::Status gdn_status_ = (expr);      \
    if (!gdn_status_.ok()) return gdn_status_; \
  } while (0)

}  // namespace gdn
