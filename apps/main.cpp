// gdn — command-line tool: replay captured cases, run the demo engine, benchmark.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "commands.h"

namespace {
void usage() {
  std::fprintf(stderr,
               "usage: gdn <command> [args]\n"
               "  replay DIR [--backend cpu|cuda]   run every capture file in DIR and compare\n"
               "  demo [--help]                     speculative-decoding engine in miniature\n"
               "  bench [--help]                    GPU benchmark (CUDA builds)\n");
}

int run(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const char* cmd = argv[1];
  if (!std::strcmp(cmd, "replay")) return gdn::cli::cmd_replay(argc - 1, argv + 1);
  if (!std::strcmp(cmd, "demo")) return gdn::cli::cmd_demo(argc - 1, argv + 1);
  if (!std::strcmp(cmd, "bench")) return gdn::cli::cmd_bench(argc - 1, argv + 1);
  std::fprintf(stderr, "gdn: unknown command '%s'\n", cmd);
  usage();
  return 2;
}
}  // namespace

// The commands report their errors themselves; what escapes them (out of memory, a thread that
// cannot start) ends the tool with one line, not an abort.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "gdn: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gdn: %s\n", e.what());
  }
  return 2;
}
