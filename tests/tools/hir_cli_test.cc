// The `hir` command as a user runs it: exit codes, messages, --np launching,
// and every program in ir_examples/invalid/ failing with its documented error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_util.h"

namespace hir::test {
namespace {

CommandResult hir(std::vector<std::string> args, int timeout_s = 180) {
  args.insert(args.begin(), hirBinary());
  return runCommand(args, timeout_s);
}

std::string example(const std::string& name) { return examplesDir() + "/" + name; }

TEST(HirCli, HelpListsCommandsAndExitCodes) {
  CommandResult r = hir({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"run", "check", "print", "exit codes"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  CommandResult run = hir({"run", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("--np"), std::string::npos);
}

TEST(HirCli, UnknownCommandIsBadUsage) {
  CommandResult r = hir({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
}

TEST(HirCli, UnknownOptionIsBadUsage) {
  CommandResult r = hir({"run", example("allreduce.json"), "--nope"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown option '--nope'"), std::string::npos) << r.err;
}

TEST(HirCli, MissingProgramFileNamesIt) {
  CommandResult r = hir({"check", "/nonexistent/prog.json", "--world", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/prog.json"), std::string::npos) << r.err;
}

TEST(HirCli, RunStartsFourRanksItself) {
  CommandResult r = hir({"run", example("ring_allgather.json"), "--np", "4", "--device", "host"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("on 4 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out;
}

TEST(HirCli, PluginKernelsRunOnEveryRankAndAreNeededToLoad) {
  const std::string prog = std::string(HIR_SOURCE_DIR) + "/tests/plugin/rotate_rows.json";
  CommandResult r = hir({"run", prog, "--np", "2", "--device", "host", "--plugin",
                         HIR_EXAMPLE_PLUGIN, "--iters", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out;
  CommandResult check = hir({"check", prog, "--world", "3", "--plugin", HIR_EXAMPLE_PLUGIN});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  CommandResult without = hir({"check", prog, "--world", "2"});
  EXPECT_EQ(without.exit_code, 2);
  EXPECT_NE(without.err.find("/body/4/name: no kernel named 'rotate_rows' is registered"),
            std::string::npos)
      << without.err;
  CommandResult missing = hir({"run", prog, "--plugin", "/nonexistent/lib.so"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--plugin /nonexistent/lib.so: cannot load it"), std::string::npos)
      << missing.err;
}

// Counts are checked against their range, never truncated to 32 bits (a
// 2^32 + 2 --np once ran 2 ranks, and --iters 2^32 ran none and said ok).
TEST(HirCli, CountFlagsOutsideTheirRangeAreBadUsage) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--iters", "4294967296"}, {"--np", "4294967298"}, {"--timeout", "2147483648"},
           {"--warmup", "99999999999999999999"}}) {
    CommandResult r = hir({"run", example("allreduce.json"), flag, value});
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(flag + " must be in ["), std::string::npos) << r.err;
  }
}

TEST(HirCli, MoreRanksThanCoresStillRun) {
  CommandResult r = hir({"run", example("allreduce.json"), "--np", "8", "--device", "host"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("on 8 ranks"), std::string::npos) << r.out;
}

TEST(HirCli, FailedCheckExitsOneAndReportsElements) {
  CommandResult r = hir({"run", sourceDir() + "/tests/tools/data/failing_check.json", "--np", "2",
                         "--device", "host"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("rank 1: check failed at /body/2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("got 1 expected 2"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
}

TEST(HirCli, AStuckWaitTimesOutNamesWhatIsPendingAndEndsEveryRank) {
  // The cross-rank check would reject this program; without it, rank 0 waits
  // for a message nobody sends. The job must end, not hang.
  CommandResult r = hir({"run", sourceDir() + "/tests/tools/data/unmatched_recv.json", "--np",
                         "2", "--device", "host", "--timeout", "2", "--no-schedule-check"},
                        60);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("/body/1/then/1: on rank 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pending communications"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'r' (recv) at /body/1/then/0"), std::string::npos) << r.err;
}

TEST(HirCli, TheCrossRankCheckRejectsAnUnmatchedRecvBeforeRunning) {
  CommandResult r = hir({"run", sourceDir() + "/tests/tools/data/unmatched_recv.json", "--np",
                         "2", "--device", "host"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("the first unmatched is the recv (/body/1/then/0) on rank 0"),
            std::string::npos)
      << r.err;
}

TEST(HirCli, ParamOverrideChangesTheRun) {
  CommandResult ok = hir({"run", example("allgather.json"), "--np", "2", "--device", "host",
                          "--param", "n=33"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  CommandResult bad = hir({"run", example("allgather.json"), "--param", "nosuch=1"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown param 'nosuch'"), std::string::npos) << bad.err;
}

TEST(HirCli, CheckAcceptsAValidProgramForEveryWorldSize) {
  for (int world = 1; world <= 8; ++world) {
    CommandResult r = hir({"check", example("ring_allgather.json"), "--world",
                           std::to_string(world)});
    EXPECT_EQ(r.exit_code, 0) << "world " << world << ": " << r.err;
  }
}

TEST(HirCli, PrintShowsNodePaths) {
  CommandResult r = hir({"print", example("ring_allgather.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("/body/0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/body/"), std::string::npos) << r.out;
}

TEST(HirCli, CudaWithoutAGpuIsAClearError) {
  CommandResult probe = hir({"run", example("allreduce.json"), "--device", "cuda"});
  if (probe.exit_code == 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(probe.exit_code, 2) << probe.err;
  EXPECT_NE(probe.err.find("cuda"), std::string::npos) << probe.err;
  EXPECT_NE(probe.err.find("not available"), std::string::npos) << probe.err;
}

// ir_examples/invalid/NAME.json fails `hir check --world N` with exit 2 and
// every line of NAME.expected after the first (`world: N`) in its errors.
class InvalidExample : public ::testing::TestWithParam<std::string> {};

TEST_P(InvalidExample, FailsWithItsDocumentedError) {
  std::string json = GetParam();
  std::string expected_path = json.substr(0, json.size() - 5) + ".expected";
  std::ifstream in(expected_path);
  ASSERT_TRUE(in) << "missing " << expected_path;
  std::string first;
  std::getline(in, first);
  ASSERT_EQ(first.rfind("world: ", 0), 0u) << expected_path << " must start with 'world: N'";
  std::string world = first.substr(7);
  CommandResult r = hir({"check", json, "--world", world});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("hir: error: "), std::string::npos) << r.err;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EXPECT_NE(r.err.find(line), std::string::npos) << "expected '" << line << "' in:\n" << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Invalid, InvalidExample,
                         ::testing::ValuesIn(listJson(examplesDir() + "/invalid")),
                         [](const auto& info) {
                           std::string n = std::filesystem::path(info.param).stem().string();
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace hir::test
