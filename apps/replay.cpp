// gdn replay DIR [--backend cpu|cuda] [--fill VALUE] [--pool-pad N]
//
// Runs every *.safetensors capture/golden case in DIR (sorted by name) on one backend and prints
// one line per case: the relative L2 error of each output against the file's float64 reference
// (conv_state and z: bit-exact or not), pass/fail and the wall time of the call. Exit status: 0 when
// every case passes, 1 when any fails, 2 for usage errors, an empty DIR or an unavailable backend.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "args.h"
#include "capture/case.h"
#include "commands.h"

namespace gdn::cli {
namespace {

void replay_usage() {
  std::fprintf(stderr,
               "usage: gdn replay DIR [--backend cpu|cuda] [--fill VALUE] [--pool-pad N]\n"
               "  runs every *.safetensors case in DIR and compares it to its expected outputs\n"
               "  --fill VALUE   value written into outputs before the call (default nan)\n"
               "  --pool-pad N   run with N extra elements between pool slots (strided pools)\n");
}

std::string describe_output(const capture::OutputCheck& o) {
  char buf[160];
  if (!o.has_reference) {
    std::snprintf(buf, sizeof buf, "%s (no reference)", o.name.c_str());
  } else if (o.exact) {
    if (o.inexact == 0)
      std::snprintf(buf, sizeof buf, "%s bit-exact", o.name.c_str());
    else
      std::snprintf(buf, sizeof buf, "%s NOT bit-exact (%lld of %lld differ)", o.name.c_str(),
                    static_cast<long long>(o.inexact), static_cast<long long>(o.compared));
  } else {
    std::snprintf(buf, sizeof buf, "%s %.2e%s", o.name.c_str(), o.rel_err,
                  o.rel_err <= o.tol ? "" : " > tol");
  }
  std::string s = buf;
  if (o.untouched_changed)
    s += " (" + std::to_string(o.untouched_changed) + " untouched elements changed)";
  return s;
}

}  // namespace

// Extra elements between pool slots at most (a strided pool's padding, not its size).
constexpr int64_t kMaxPoolPad = int64_t{1} << 20;

int cmd_replay(int argc, char** argv) {
  std::string dir, backend_name = "cpu";
  capture::RunOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      if (a.compare(0, n, flag) == 0 && a.size() > n && a[n] == '=') return argv[i] + n + 1;
      if (a == flag && i + 1 < argc) return argv[++i];
      return nullptr;
    };
    if (a == "--help" || a == "-h") {
      replay_usage();
      return 0;
    } else if (const char* v = value("--backend")) {
      backend_name = v;
    } else if (const char* v = value("--fill")) {
      char* end = nullptr;
      options.fill = std::strtod(v, &end);  // any double, nan and inf included
      if (!*v || *end) {
        std::fprintf(stderr, "gdn replay: --fill needs a number, got '%s'\n", v);
        return 2;
      }
    } else if (const char* v = value("--pool-pad")) {
      if (!parse_int(v, 0, kMaxPoolPad, &options.pool_slot_pad)) {
        std::fprintf(stderr, "gdn replay: --pool-pad needs an integer in [0, %lld], got '%s'\n",
                     static_cast<long long>(kMaxPoolPad), v);
        return 2;
      }
    } else if (a.rfind("--", 0) != 0 && dir.empty()) {
      dir = a;
    } else {
      std::fprintf(stderr, "gdn replay: unexpected argument '%s'\n", a.c_str());
      replay_usage();
      return 2;
    }
  }
  if (dir.empty()) {
    replay_usage();
    return 2;
  }
  capture::Backend backend;
  Status s = capture::parse_backend(backend_name, &backend);
  if (!s.ok()) {
    std::fprintf(stderr, "gdn replay: %s\n", s.message().c_str());
    return 2;
  }
  if (!capture::backend_available(backend)) {
    std::fprintf(stderr,
                 "gdn replay: backend '%s' is not available (not built, or no device found)\n",
                 backend_name.c_str());
    return 2;
  }
  const std::vector<std::string> files = capture::list_case_files(dir);
  if (files.empty()) {
    std::fprintf(stderr, "gdn replay: no *.safetensors files in '%s'\n", dir.c_str());
    return 2;
  }

  std::printf("%-34s %-27s %-7s %-5s %9s  %s\n", "case", "op", "backend", "", "ms", "outputs");
  int failed = 0;
  for (const std::string& f : files) {
    capture::GoldenCase c;
    capture::CaseResult r;
    Status ls = capture::load_case(f, &c);
    if (ls.ok()) {
      r = capture::run_case(c, backend, options);
    } else {
      r.name = f;
      r.op = "?";
      r.backend = backend;
      r.status = ls;
    }
    const bool pass = r.status.ok() && r.pass;
    failed += pass ? 0 : 1;
    std::string outs;
    for (const capture::OutputCheck& o : r.outputs) outs += (outs.empty() ? "" : ", ") + describe_output(o);
    std::printf("%-34s %-27s %-7s %-5s %9.3f  %s\n", r.name.c_str(), r.op.c_str(),
                capture::backend_name(r.backend).c_str(), pass ? "pass" : "FAIL", r.ms, outs.c_str());
    if (!r.status.ok()) std::printf("    error: %s\n", r.status.message().c_str());
    for (const capture::OutputCheck& o : r.outputs)
      if (!o.pass) std::printf("    %s: %s\n", o.name.c_str(), o.detail.c_str());
  }
  std::printf("%zu cases, %d failed\n", files.size(), failed);
  return failed ? 1 : 0;
}

}  // namespace gdn::cli
