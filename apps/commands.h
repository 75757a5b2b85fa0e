// The gdn command-line tool's subcommands; each lives in its own file.
#pragma once
namespace gdn::cli {
int cmd_replay(int argc, char** argv);  // gdn replay DIR [--backend cpu|cuda]
int cmd_demo(int argc, char** argv);    // gdn demo [...]
int cmd_bench(int argc, char** argv);   // gdn bench [...]
}  // namespace gdn::cli
