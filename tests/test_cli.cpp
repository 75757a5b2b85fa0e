// The gdn command-line tool as a user meets it: a bad argument ends it with exit code 2 and one
// line that names the flag, never an abort, a silently misread value or an allocation that fails;
// gdn replay prints the backend of every case. The tool is run as a child process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

namespace {

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr
};

CliRun gdn(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(GDN_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return r;
}

// Exit code 2 and one line holding `word`.
void expect_refused(const std::string& args, const std::string& word) {
  const CliRun r = gdn(args);
  EXPECT_EQ(r.rc, 2) << "gdn " << args << "\n" << r.out;
  EXPECT_NE(r.out.find(word), std::string::npos) << "gdn " << args << "\n" << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "gdn " << args << "\n" << r.out;
}

TEST(Cli, ReplayPrintsTheBackendOfEveryCase) {
  const CliRun r = gdn(std::string("replay ") + GDN_GOLDEN_DIR + " --backend cpu");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::istringstream lines(r.out);
  int cases = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" pass ") == std::string::npos) continue;
    ++cases;
    EXPECT_NE(line.find(" cpu "), std::string::npos) << line;
  }
  EXPECT_GE(cases, 10) << r.out;
}

TEST(Cli, ReplayRefusesBadNumbers) {
  const std::string dir = std::string("replay ") + GDN_GOLDEN_DIR;
  for (const char* v : {"abc", "-1", "1e9", "1099511627776", "99999999999999999999", "9223372036854775807"})
    expect_refused(dir + " --pool-pad " + v, "--pool-pad");
  expect_refused(dir + " --fill abc", "--fill");
}

TEST(Cli, DemoRefusesBadArguments) {
  const std::string demo = "demo --short --no-progress";
  expect_refused(demo + " --weights " + std::filesystem::temp_directory_path().string(), "is a directory");
  expect_refused(demo + " --hidden 1099511627776", "hidden");
  expect_refused(demo + " --head-k-dim 1099511627776", "head_k_dim");
  expect_refused(demo + " --vocab 1000000 --hidden 65536", "weights");
  expect_refused(demo + " --layers 99999999999999999999", "--layers");
  expect_refused(demo + " --requests 4294967297", "--requests");
  expect_refused(demo + " --threads 100000", "--threads");
  expect_refused(demo + " --max-running 100000", "--max-running");
  expect_refused(demo + " --corrupt nan", "--corrupt");
  expect_refused(demo + " --draft-noise nan", "--draft-noise");
  expect_refused(demo + " --prompt-len 3:99999999999", "--prompt-len");
  expect_refused(demo + " --preset", "--preset");
}

#ifdef GDN_WITH_CUDA
TEST(Cli, BenchRefusesBadNumbersBeforeLookingForADevice) {
  expect_refused("bench --n 4,abc", "--n");
  expect_refused("bench --t 0", "--t");
  expect_refused("bench --shapes 1x8192,4", "--shapes");
  expect_refused("bench --replays 5", "--replays");
  expect_refused("bench --state f16", "--state");
}
#endif

}  // namespace
