#include <cstdio>
#include "commands.h"
namespace gdn::cli {
int cmd_replay(int, char**) {
  std::fprintf(stderr, "gdn replay: not implemented yet\n");
  return 2;
}
}  // namespace gdn::cli
