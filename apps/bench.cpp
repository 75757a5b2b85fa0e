#include <cstdio>
#include "commands.h"
namespace gdn::cli {
int cmd_bench(int, char**) {
  std::fprintf(stderr, "gdn bench: not implemented yet\n");
  return 2;
}
}  // namespace gdn::cli
