#include <cstdio>
#include "commands.h"
namespace gdn::cli {
int cmd_demo(int, char**) {
  std::fprintf(stderr, "gdn demo: not implemented yet\n");
  return 2;
}
}  // namespace gdn::cli
