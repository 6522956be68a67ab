// The `hir` command as a user runs it: exit codes, messages, --np launching,
// and every program in ir_examples/invalid/ failing with its documented error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <hostir/backend.h>
#include <hostir/version.h>

#include "support/test_util.h"

namespace hir::test {
namespace {

CommandResult hir(std::vector<std::string> args, int timeout_s = 180) {
  args.insert(args.begin(), hirBinary());
  return runCommand(args, timeout_s);
}

std::string example(const std::string& name) { return examplesDir() + "/" + name; }

// `text` in single quotes for sh (runCommand feeds no standard input: the
// tests that need one go through `sh -c '... < file'`).
std::string shellQuoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CommandResult shell(const std::string& command, int timeout_s = 180) {
  return runCommand({"sh", "-c", command}, timeout_s);
}

// A benchmark binary of this build (bench/ puts them beside hir), or "" when
// this build has none of that name (no Google Benchmark, no CUDA).
std::string benchBinary(const std::string& name) {
  std::string path = std::string(HIR_BINARY_DIR) + "/bin/" + name;
  return std::filesystem::exists(path) ? path : "";
}

TEST(HirCli, HelpListsCommandsAndExitCodes) {
  CommandResult r = hir({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"run", "check", "print", "exit codes"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  CommandResult run = hir({"run", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("--np"), std::string::npos);
}

// Every command's help names each of its options.
TEST(HirCli, EachCommandsHelpDescribesItsOptions) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"run",
       {"PROG", "standard input", "--np", "--device", "--param", "--iters", "--warmup",
        "--timeout", "--no-schedule-check", "--trace", "--plugin", "--help"}},
      {"check", {"PROG", "standard input", "--world", "--device", "--param", "--plugin"}},
      {"print", {"PROG", "standard input", "--param"}}};
  for (const auto& [command, words] : commands) {
    CommandResult r = hir({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    for (const std::string& word : words)
      EXPECT_NE(r.out.find(word), std::string::npos) << command << " --help lacks " << word;
    CommandResult same = hir({"help", command});
    EXPECT_EQ(same.exit_code, 0) << same.err;
    EXPECT_EQ(same.out, r.out);
  }
  CommandResult main = hir({"-h"});
  EXPECT_EQ(main.exit_code, 0);
  EXPECT_NE(main.out.find("--version"), std::string::npos) << main.out;
}

// The version is the project's (CMake's PROJECT_VERSION, the same as the
// installed package's hostirConfigVersion.cmake), from the library.
TEST(HirCli, VersionPrintsTheProjectVersion) {
  const std::string config = readFile(std::string(HIR_BINARY_DIR) + "/hostirConfigVersion.cmake");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(config, m, std::regex(R"re(PACKAGE_VERSION "([0-9.]+)")re")))
      << config;
  const std::string project_version = m[1];
  EXPECT_EQ(std::string(hir::version()), project_version);
  EXPECT_TRUE(std::regex_match(project_version, std::regex(R"([0-9]+\.[0-9]+\.[0-9]+)")))
      << project_version;
  for (const char* flag : {"--version", "-V"}) {
    CommandResult r = hir({flag});
    EXPECT_EQ(r.exit_code, 0) << flag << ": " << r.err;
    EXPECT_EQ(r.out, "hir " + project_version + "\n") << flag;
  }
}

TEST(HirCli, OptionsTakeEqualsForm) {
  CommandResult check = hir({"check", example("allgather.json"), "--world=3", "--param=n=5",
                             "--device=host"});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find("valid for world size 3"), std::string::npos) << check.out;
  // Forwarded to the ranks --np starts, in both forms.
  CommandResult run = hir({"run", example("allgather.json"), "--np=2", "--device=host",
                           "--param=n=33", "--iters=2", "--warmup", "1", "--timeout=60"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("on 2 ranks"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("2 timed runs after 1 warm-up"), std::string::npos) << run.out;
  CommandResult empty = hir({"run", example("allgather.json"), "--iters="});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("--iters needs a value"), std::string::npos) << empty.err;
}

// `hir run -n N` is mpirun's short form of --np; given with --np too, it is
// the same option twice. `hir sweep -n` stays nccl-tests' iterations.
TEST(HirCli, RunTakesMpirunsShortFormOfNp) {
  CommandResult run = hir({"run", example("allgather.json"), "-n", "2", "--device=host",
                           "--iters=1", "--warmup=0", "--timeout=60"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("on 2 ranks"), std::string::npos) << run.out;
  CommandResult twice = hir({"run", example("allgather.json"), "-n", "2", "--np", "3"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("--np given twice"), std::string::npos) << twice.err;
}

// `-` reads the program from standard input; with --np the launcher reads
// it and hands the ranks a temporary file, which is gone afterwards.
TEST(HirCli, ProgramFromStandardInput) {
  const std::string bin = shellQuoted(hirBinary());
  const std::string prog = shellQuoted(example("ring_allgather.json"));
  CommandResult check = shell(bin + " check - --world 2 < " + prog);
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find("'ring_allgather' is valid for world size 2"), std::string::npos)
      << check.out;
  CommandResult print = shell(bin + " print - < " + prog);
  EXPECT_EQ(print.exit_code, 0) << print.err;
  EXPECT_NE(print.out.find("/body/0"), std::string::npos) << print.out;

  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("hir_cli_stdin_" + std::to_string(getpid()));
  std::filesystem::create_directories(tmp);
  CommandResult run = shell("TMPDIR=" + shellQuoted(tmp.string()) + " " + bin +
                            " run - --np 2 --device host --param n=64 < " + prog);
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("'ring_allgather' on 2 ranks"), std::string::npos) << run.out;
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "the launcher left its temporary file in " << tmp;
  std::filesystem::remove_all(tmp);

  CommandResult single = shell(bin + " run - --device host < " + prog);
  EXPECT_EQ(single.exit_code, 0) << single.out << single.err;

  CommandResult empty = shell(bin + " check - --world 2 < /dev/null");
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_NE(empty.err.find("<stdin>"), std::string::npos) << empty.err;
}

TEST(HirCli, FractionalTimeoutIsAccepted) {
  CommandResult ok =
      hir({"run", example("allreduce.json"), "--device", "host", "--timeout", "0.5"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  // Half a second, not rounded to zero or to a whole second: the stuck wait
  // times out (exit 3).
  CommandResult stuck = hir({"run", sourceDir() + "/tests/tools/data/unmatched_recv.json", "--np",
                             "2", "--device", "host", "--timeout=0.5", "--no-schedule-check"},
                            60);
  EXPECT_EQ(stuck.exit_code, 3) << stuck.out << stuck.err;
  EXPECT_NE(stuck.err.find("pending communications"), std::string::npos) << stuck.err;
  for (const char* bad : {"0", "-1", "0.0001", "1e10", "nan", "inf"}) {
    CommandResult r = hir({"run", example("allreduce.json"), "--timeout", bad});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r.err;
  }
  CommandResult text = hir({"run", example("allreduce.json"), "--timeout", "soon"});
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.err.find("--timeout expects a number of seconds, got 'soon'"), std::string::npos)
      << text.err;
}

TEST(HirCli, AFlagGivenTwiceIsBadUsage) {
  const std::vector<std::vector<std::string>> cases = {
      {"run", example("allreduce.json"), "--np", "2", "--np", "3"},
      {"run", example("allreduce.json"), "--iters=1", "--iters", "2"},
      {"run", example("allreduce.json"), "--device", "host", "--device=host"},
      {"check", example("allreduce.json"), "--world", "2", "--world", "2"}};
  for (const std::vector<std::string>& args : cases) {
    CommandResult r = hir(args);
    EXPECT_EQ(r.exit_code, 2) << args[2] << ": " << r.out << r.err;
    const std::string flag = args[2].substr(0, args[2].find('='));
    EXPECT_NE(r.err.find(flag + " given twice"), std::string::npos) << r.err;
  }
  // Repeatable: --plugin and distinct params. (The same library twice
  // registers its kernels twice, which the registry refuses: not a usage
  // error of the command line.)
  CommandResult plugins = hir({"check", sourceDir() + "/tests/plugin/rotate_rows.json", "--world",
                               "2", "--plugin", HIR_EXAMPLE_PLUGIN, "--plugin",
                               HIR_EXAMPLE_PLUGIN});
  EXPECT_EQ(plugins.err.find("given twice"), std::string::npos) << plugins.err;
  EXPECT_NE(plugins.err.find("already registered"), std::string::npos) << plugins.err;
  CommandResult params = hir({"check", example("grouped_sendrecv.json"), "--world", "2", "--param",
                              "n=4", "--param", "rounds=2"});
  EXPECT_EQ(params.exit_code, 0) << params.err;
}

TEST(HirCli, SameParamTwiceIsBadUsage) {
  CommandResult r = hir({"check", example("grouped_sendrecv.json"), "--world", "2", "--param",
                         "rounds=2", "--param", "n=4", "--param=rounds=3"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--param rounds given twice"), std::string::npos) << r.err;
}

// The benchmarks parse their arguments before MPI starts: --help exits 0
// without mpirun (hir_p2p_bench --help once ended in MPI_ABORT), and a bad
// number names its flag (it once said "stoi").
TEST(HirCli, BenchmarkHelpExitsZero) {
  int found = 0;
  for (const std::string& name : {"hir_p2p_bench", "hir_comm_bench", "hir_link_bench"}) {
    const std::string bin = benchBinary(name);
    if (bin.empty()) continue;
    ++found;
    CommandResult r = runCommand({bin, "--help"}, 60);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("--reps"), std::string::npos) << name << ": " << r.out;
    EXPECT_EQ(r.err.find("MPI_ABORT"), std::string::npos) << name << ": " << r.err;
  }
  if (found == 0) GTEST_SKIP() << "no benchmark binary in this build";
}

TEST(HirCli, BenchmarkBadNumbersNameTheFlag) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"hir_p2p_bench", {"--reps", "x"}},       {"hir_p2p_bench", {"--min", "1X"}},
      {"hir_p2p_bench", {"--factor=2.5"}},      {"hir_p2p_bench", {"--reps", "4294967297"}},
      {"hir_p2p_bench", {"--base", "gloo"}},   {"hir_p2p_bench", {"--protocols", "auto,lazy"}},
      {"hir_p2p_bench", {"--protocols=put,put"}},
      {"hir_comm_bench", {"--iters", "x"}},     {"hir_comm_bench", {"--warmup", "-1"}},
      {"hir_comm_bench", {"--max", "lots"}},    {"hir_comm_bench", {"--iters", "4294967297"}},
      {"hir_link_bench", {"--to", "x"}},        {"hir_link_bench", {"--from", "-1"}},
      {"hir_link_bench", {"--min", "8"}},       {"hir_link_bench", {"--reps", "0"}},
      {"hir_link_bench", {"--to=0"}}};
  int found = 0;
  for (const auto& [name, args] : cases) {
    const std::string bin = benchBinary(name);
    if (bin.empty()) continue;
    ++found;
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = runCommand(argv, 60);
    EXPECT_EQ(r.exit_code, 2) << name << " " << args[0] << ": " << r.out << r.err;
    const std::string flag = args[0].substr(0, args[0].find('='));
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("stoi"), std::string::npos) << r.err;
  }
  if (found == 0) GTEST_SKIP() << "no benchmark binary in this build";
  const std::string p2p = benchBinary("hir_p2p_bench");
  if (!p2p.empty()) {
    CommandResult twice = runCommand({p2p, "--reps", "2", "--reps=3"}, 60);
    EXPECT_EQ(twice.exit_code, 2);
    EXPECT_NE(twice.err.find("--reps given twice"), std::string::npos) << twice.err;
  }
}

// hir_link_bench needs two GPUs that map each other's memory; without them
// (CI, a GPU of its own) it says which it needed and exits 1, not a crash.
TEST(HirCli, LinkBenchWithoutTwoGpusSaysSo) {
  const std::string bin = benchBinary("hir_link_bench");
  if (bin.empty()) GTEST_SKIP() << "no hir_link_bench in this build (no CUDA)";
  CommandResult r = runCommand({bin, "--from", "0", "--to", "1000", "--reps", "1"}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("needs GPUs 0 and 1000"), std::string::npos) << r.err;
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
// A kernel's complaint about its node names the node: a plugin's error
// used to reach the user without any place.
TEST(HirCli, AKernelsErrorNamesItsNode) {
  const std::string prog = (std::filesystem::temp_directory_path() /
                            ("hir_no_shift_" + std::to_string(getpid()) + ".json"))
                               .string();
  std::ofstream(prog) << R"({"format": "hostir/1", "name": "no_shift", "body": [
    {"op": "allocate", "name": "a", "dtype": "float32", "shape": [4, 2]},
    {"op": "allocate", "name": "b", "dtype": "float32", "shape": [4, 2]},
    {"op": "kernel", "name": "rotate_rows", "reads": ["a"], "writes": ["b"]}]})";
  CommandResult r = hir({"run", prog, "--device", "host", "--plugin", HIR_EXAMPLE_PLUGIN});
  std::filesystem::remove(prog);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("/body/2: on rank 0: kernel 'rotate_rows' asked for arg 'shift', which "
                       "its node does not give"),
            std::string::npos)
      << r.err;
}

TEST(HirCli, CountFlagsOutsideTheirRangeAreBadUsage) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--iters", "4294967296"}, {"--np", "4294967298"}, {"--timeout", "2147483648"},
           {"--warmup", "99999999999999999999"}}) {
    CommandResult r = hir({"run", example("allreduce.json"), flag, value});
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(flag + " must be in ["), std::string::npos) << r.err;
  }
}

// What can be decided before the ranks start is said once, by the launcher,
// with exit 2 and none of mpirun's lines.
TEST(HirCli, CudaWithoutAGpuIsRefusedBeforeAnyRankStarts) {
  CommandResult r = hir({"run", example("allreduce.json"), "--np", "2", "--device", "cuda"});
  if (r.exit_code == 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("hir: error: --device cuda: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("mpirun"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Primary job"), std::string::npos) << r.err;
}

TEST(HirCli, AWorldBelowMinWorldSizeIsRefusedBeforeLaunchAlsoUnchecked) {
  CommandResult r = hir({"run", example("team_allreduce.json"), "--np", "1", "--device", "host",
                         "--no-schedule-check"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("/min_world_size: the program needs at least 2 ranks"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("Primary job"), std::string::npos) << r.err;
}

// A launcher that is terminated (TERM, or KILL, which it cannot catch)
// leaves no rank behind; TERM ends it with exit 3 and a hir line.
TEST(HirCli, KillingTheLauncherLeavesNoRankBehind) {
  // A copy of a program under a name no other process has; "hir ru[n] .*NAME"
  // matches the launcher, mpirun and the ranks, not the shell around them
  // (whose command line holds the pattern, which the pattern does not match).
  const std::string marker = "hir_cli_kill_" + std::to_string(getpid());
  const std::filesystem::path prog = std::filesystem::temp_directory_path() / (marker + ".json");
  std::filesystem::copy_file(example("allreduce.json"), prog,
                             std::filesystem::copy_options::overwrite_existing);
  const std::string count = "$(pgrep -f 'hir ru[n] .*" + marker + "' | wc -l)";
  // A launcher killed by KILL leaves its temporary folder (the ranks'
  // reports) behind: in a folder of this test's.
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / (marker + "_tmp");
  std::filesystem::create_directories(tmp);
  for (const char* sig : {"TERM", "KILL"}) {
    CommandResult r = shell("export TMPDIR=" + shellQuoted(tmp.string()) + "; " +
                            shellQuoted(hirBinary()) + " run " + shellQuoted(prog.string()) +
                            " --np 2 --device host --iters 100000000 2>&1 & pid=$!; "
                            "for i in $(seq 200); do [ " + count +
                            " -ge 4 ] && break; sleep 0.1; done; echo started=" + count + "; "
                            "kill -" + sig + " $pid; wait $pid; echo rc=$?; "
                            "for i in $(seq 100); do [ " + count +
                            " -eq 0 ] && break; sleep 0.1; done; echo left=" + count);
    EXPECT_NE(r.out.find("started=4"), std::string::npos) << sig << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("left=0"), std::string::npos) << sig << ": " << r.out << r.err;
    if (std::string(sig) == "TERM") {
      EXPECT_NE(r.out.find("rc=3"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("hir: error: interrupted by signal 15"), std::string::npos) << r.out;
    }
  }
  std::filesystem::remove(prog);
  std::filesystem::remove_all(tmp);
}

// Two mpiruns started at the same moment once collided in Open MPI's session
// directory (one failed before any rank started): each launch keeps its own.
TEST(HirCli, EightLaunchesAtOnceAllPass) {
  const std::string run = shellQuoted(hirBinary()) + " run " +
                          shellQuoted(example("allreduce.json")) + " --np 2 --device host";
  CommandResult r = shell(
      "fails=0; for round in 1 2; do pids=''; for i in 1 2 3 4 5 6 7 8; do " + run +
          " >/dev/null 2>\"${TMPDIR:-/tmp}/hir_cli_at_once_$$_$i\" & pids=\"$pids $!\"; done; "
          "i=0; for p in $pids; do i=$((i+1)); wait $p || { fails=$((fails+1)); "
          "cat \"${TMPDIR:-/tmp}/hir_cli_at_once_$$_$i\"; }; done; done; "
          "rm -f \"${TMPDIR:-/tmp}\"/hir_cli_at_once_$$_*; echo fails=$fails",
      300);
  EXPECT_NE(r.out.find("fails=0"), std::string::npos) << r.out << r.err;
}

// What the launcher says when the job ends in a way the ranks did not
// decide: a rank killed, mpirun terminated or killed. `action` runs in sh
// once both ranks of a long loop have started and reported, with $ranks
// (the ranks' pids, newest last) and $mpirun set; it ends the job. Returns
// the launcher's output (both streams) with "rc=N" and "left=N" (ranks
// still running afterwards) appended.
std::string endTheJobWhileItRuns(const std::string& name, const std::string& action) {
  const std::string marker = name + "_" + std::to_string(getpid());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / marker;
  std::filesystem::create_directories(dir);
  const std::filesystem::path prog = dir / (marker + ".json");
  std::filesystem::copy_file(sourceDir() + "/tests/tools/data/stress_allreduce_loop.json", prog,
                             std::filesystem::copy_options::overwrite_existing);
  // The ranks' command lines, not the launcher's, hold " -- PROG".
  const std::string ranks = "pgrep -f '^[^ ]*hir ru[n] .* -- .*" + marker + "'";
  CommandResult r = shell(
      "export TMPDIR=" + shellQuoted(dir.string()) + "; " + shellQuoted(hirBinary()) + " run " +
      shellQuoted(prog.string()) +
      " --np 2 --device host --param iters=1000000000 --no-schedule-check 2>&1 & pid=$!; "
      "for i in $(seq 300); do [ $(ls \"$TMPDIR\"/hir-ranks-*/rank-* 2>/dev/null | wc -l) -ge 2 ] "
      "&& break; sleep 0.1; done; sleep 0.3; "
      "ranks=$(" + ranks + "); mpirun=$(pgrep -f '^[^ ]*mpiru[n] .*" + marker + "'); "
      "echo ranks=$ranks mpirun=$mpirun; " + action + "; wait $pid; echo rc=$?; "
      "for i in $(seq 100); do [ $(" + ranks + " | wc -l) -eq 0 ] && break; sleep 0.1; done; "
      "echo left=$(" + ranks + " | wc -l)",
      120);
  std::filesystem::remove_all(dir);
  return r.out + r.err;
}

TEST(HirCli, ARankKilledBySigkillIsNamedAndExitsThree) {
  const std::string out = endTheJobWhileItRuns(
      "hir_cli_kill_rank", "victim=$(echo $ranks | tr ' ' '\\n' | tail -1); "
                           "echo victim=$victim; kill -KILL $victim");
  std::smatch victim;
  ASSERT_TRUE(std::regex_search(out, victim, std::regex("victim=([0-9]+)"))) << out;
  EXPECT_NE(out.find("rc=3"), std::string::npos) << out;
  EXPECT_NE(out.find("left=0"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex("hir: error: the job failed: rank [01] \\(pid " + victim[1].str() +
                      "\\) was killed by signal 9 \\(Killed\\): by kill -9 or the kernel's "
                      "out-of-memory killer \\(mpirun exit 137\\)")))
      << out;
  // One line, none of mpirun's.
  EXPECT_EQ(out.find("mpirun noticed"), std::string::npos) << out;
  EXPECT_EQ(out.find("-----"), std::string::npos) << out;
}

TEST(HirCli, ARankThatCrashesIsNamedWithItsSignal) {
  const std::string out = endTheJobWhileItRuns(
      "hir_cli_crash_rank", "victim=$(echo $ranks | tr ' ' '\\n' | tail -1); "
                            "echo victim=$victim; kill -SEGV $victim");
  std::smatch victim;
  ASSERT_TRUE(std::regex_search(out, victim, std::regex("victim=([0-9]+)"))) << out;
  EXPECT_NE(out.find("rc=3"), std::string::npos) << out;
  EXPECT_NE(out.find("left=0"), std::string::npos) << out;
  EXPECT_NE(out.find("(pid " + victim[1].str() + ") was killed by signal 11 (Segmentation fault)"),
            std::string::npos)
      << out;
}

// mpirun exits 1 when it is terminated: the code of a failed check, which
// hir once passed on.
TEST(HirCli, TerminatingMpirunIsARuntimeFailureNotAFailedCheck) {
  const std::string out = endTheJobWhileItRuns("hir_cli_term_mpirun", "kill -TERM $mpirun");
  EXPECT_NE(out.find("rc=3"), std::string::npos) << out;
  EXPECT_NE(out.find("left=0"), std::string::npos) << out;
  EXPECT_NE(out.find("hir: error: the job failed: every rank was ended by signal 15 "
                     "(Terminated), sent by mpirun (when it is interrupted, or after a rank "
                     "ended) or from outside hir"),
            std::string::npos)
      << out;
}

TEST(HirCli, KillingMpirunLeavesNoRankBehindAndSaysSo) {
  const std::string out = endTheJobWhileItRuns("hir_cli_kill_mpirun", "kill -KILL $mpirun");
  EXPECT_NE(out.find("rc=3"), std::string::npos) << out;
  EXPECT_NE(out.find("left=0"), std::string::npos) << out;
  EXPECT_NE(out.find("hir: error: the job failed: the ranks ended with mpirun (mpirun was killed "
                     "by signal 9 (Killed))"),
            std::string::npos)
      << out;
}

TEST(HirCli, AnMpirunThatCannotStartIsNamed) {
  const std::string bin = shellQuoted(hirBinary());
  const std::string prog = shellQuoted(example("allreduce.json"));
  CommandResult missing =
      shell("HIR_MPIRUN=/nonexistent/mpirun " + bin + " run " + prog + " --np 2 --device host");
  EXPECT_EQ(missing.exit_code, 2) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("hir: error: --np 2 needs mpirun (OpenMPI) on PATH or in "
                             "HIR_MPIRUN: cannot run '/nonexistent/mpirun': No such file"),
            std::string::npos)
      << missing.err;
  // A launcher that fails before any rank starts: not a failed check.
  CommandResult failing = shell("HIR_MPIRUN=false " + bin + " run " + prog + " --np 2 --device host");
  EXPECT_EQ(failing.exit_code, 3) << failing.out << failing.err;
  EXPECT_NE(failing.err.find("hir: error: mpirun ended (mpirun exit 1) before any rank started"),
            std::string::npos)
      << failing.err;
  // A launcher that starts nothing and exits 0: not a success either.
  CommandResult nothing = shell("HIR_MPIRUN=true " + bin + " run " + prog + " --np 2 --device host");
  EXPECT_EQ(nothing.exit_code, 3) << nothing.out << nothing.err;
  EXPECT_NE(nothing.err.find("hir: error: mpirun ended (mpirun exit 0) before any rank started"),
            std::string::npos)
      << nothing.err;
}

// Where the result cannot go is bad usage before the run, not a runtime
// failure after it: --json naming a directory was accepted, the program
// ran, and writing failed at the end (exit 3).
TEST(HirCli, AResultFileThatIsADirectoryIsRefusedBeforeTheRun) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  CommandResult r = hir({"run", example("allreduce.json"), "--device", "host", "--json", dir});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--json: cannot write '" + dir + "': it is a directory"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("hir: ok"), std::string::npos) << r.out;
}

// The check at a world too large for the memory it may use: an error that
// says so (exit 3), not "internal error: std::bad_alloc" (exit 4).
TEST(HirCli, RunningOutOfHostMemoryIsARuntimeFailure) {
  if (HIR_TEST_SANITIZED)
    GTEST_SKIP() << "a sanitizer reserves more address space than the limit this test sets";
  CommandResult r = shell("ulimit -v 2000000 && " + shellQuoted(hirBinary()) + " check " +
                              shellQuoted(example("ring_allgather.json")) + " --world 100000",
                          120);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("hir: error: out of host memory in 'check'"), std::string::npos) << r.err;
}

// A device file that never ends is refused once past the size limit, not
// read until the memory is gone.
TEST(HirCli, AnEndlessInputIsRefusedAtTheSizeLimit) {
  CommandResult r = hir({"check", "/dev/zero", "--world", "2"}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot read '/dev/zero': it is longer than 268435456 bytes"),
            std::string::npos)
      << r.err;
}

// 2^50 bytes: a valid program (the check), an allocation no machine here
// can hold. Refused with the numbers (exit 3), on one rank and under --np,
// where each rank says it once and mpirun adds nothing.
TEST(HirCli, AnAllocationBeyondMemoryFailsClearly) {
  const std::string prog = sourceDir() + "/tests/tools/data/huge_allocation.json";
  CommandResult check = hir({"check", prog, "--world", "2"});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  const std::string says =
      "error: /body/0: on rank 0: 'huge': host allocate of 1125899906842624 bytes (1 PiB): more than "
      "this process can be given now, at most ";
  CommandResult one = hir({"run", prog, "--device", "host"});
  EXPECT_EQ(one.exit_code, 3) << one.out << one.err;
  EXPECT_NE(one.err.find("hir: " + says), std::string::npos) << one.err;
  EXPECT_NE(one.err.find("MemAvailable + SwapFree in /proc/meminfo"), std::string::npos)
      << one.err;
  CommandResult two = hir({"run", prog, "--np", "2", "--device", "host"});
  EXPECT_EQ(two.exit_code, 3) << two.out << two.err;
  EXPECT_TRUE(two.err.find("hir: rank 0: " + says) != std::string::npos ||
              two.err.find("hir: rank 1: error: /body/0: on rank 1: 'huge': host allocate of "
                           "1125899906842624 bytes") != std::string::npos)
      << two.err;
  EXPECT_EQ(two.err.find("MPI_ABORT"), std::string::npos) << two.err;
  EXPECT_EQ(two.err.find("-----"), std::string::npos) << two.err;
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

// --graph (CUDA graphs) asks for what only the cuda device, a capturable
// backend and the cross-rank check give: each missing piece is exit 2
// before anything runs, with a line that says which.
TEST(HirCli, GraphModeRefusesWhatCannotBeCaptured) {
  CommandResult host = hir({"run", example("alltoall.json"), "--device", "host", "--graph"});
  EXPECT_EQ(host.exit_code, 2) << host.out << host.err;
  EXPECT_NE(host.err.find("graph mode needs a device with graphs (cuda); device 'host' has none"),
            std::string::npos)
      << host.err;
  CommandResult unchecked =
      hir({"run", example("alltoall.json"), "--graph", "--no-schedule-check"});
  EXPECT_EQ(unchecked.exit_code, 2);
  EXPECT_NE(unchecked.err.find("--graph needs the cross-rank check"), std::string::npos)
      << unchecked.err;
  CommandResult traced = hir({"run", example("alltoall.json"), "--graph", "--trace", "t.json"});
  EXPECT_EQ(traced.exit_code, 2);
  EXPECT_NE(traced.err.find("--graph and --trace cannot be combined"), std::string::npos)
      << traced.err;
  CommandResult mode =
      hir({"run", example("alltoall.json"), "--symmetric-memory", "sometimes"});
  EXPECT_EQ(mode.exit_code, 2);
  EXPECT_NE(mode.err.find("--symmetric-memory: unknown symmetric memory mode 'sometimes'; "
                          "expected one of \"auto\", \"on\" or \"off\""),
            std::string::npos)
      << mode.err;
  EXPECT_NE(hir({"run", "--help"}).out.find("--symmetric-memory"), std::string::npos);
  EXPECT_NE(hir({"run", "--help"}).out.find("--graph"), std::string::npos);
  EXPECT_NE(hir({"sweep", "--help"}).out.find("--graph"), std::string::npos);
}

// `hir check --device cuda` says whether a run can be captured, and names
// the node that stops it (only in a build with the nccl backend).
// What auto decided for messages through peer-mapped memory: the example's
// 8-byte, 4 KiB and 64 KiB messages are eager (auto, and eager asked for),
// its 16 MiB + 4 B one put (4 iterations x 2 ranks x (23 + 1)); collectives' 32 KiB
// chunks are put and get, 1 KiB ones eager (put and get with eager off,
// where the in-place allreduce is two-shot: more messages); a program
// without ipc prints no such line.
TEST(HirCli, CheckCountsThePeerMappedMessagesOfARunByProtocol) {
  CommandResult eager = hir({"check", example("eager_messages_ipc.json"), "--world", "2"});
  ASSERT_EQ(eager.exit_code, 0) << eager.out << eager.err;
  EXPECT_NE(eager.out.find("hir: messages through peer-mapped memory per run over all ranks: "
                           "ipc: 8 put, 184 eager\n"),
            std::string::npos)
      << eager.out;
  // Its largest eager send is 64 KiB: 8 slots of 64 KiB per sender.
  EXPECT_NE(eager.out.find("hir: ipc's eager slots: 8 of 64 KiB per sender, 1 MiB per rank at "
                           "world 2\n"),
            std::string::npos)
      << eager.out;
  CommandResult collectives = hir({"check", example("collectives_ipc.json"), "--world", "4"});
  ASSERT_EQ(collectives.exit_code, 0) << collectives.out << collectives.err;
  EXPECT_NE(collectives.out.find("ipc: 81 put, 72 get\n"), std::string::npos) << collectives.out;
  CommandResult small = hir({"check", example("eager_collectives_ipc.json"), "--world", "4"});
  EXPECT_NE(small.out.find("ipc: 444 eager\n"), std::string::npos) << small.out;
  CommandResult eager_off = runCommand({"env", "HIR_IPC_EAGER_MAX=0", hirBinary(), "check",
                                        example("eager_collectives_ipc.json"), "--world", "4"});
  EXPECT_NE(eager_off.out.find("ipc: 156 put, 336 get\n"), std::string::npos) << eager_off.out;
  CommandResult none = hir({"check", example("ring_exchange.json"), "--world", "2"});
  EXPECT_EQ(none.out.find("peer-mapped"), std::string::npos) << none.out;
  EXPECT_EQ(none.out.find("eager slots"), std::string::npos) << none.out;
}

TEST(HirCli, CheckForCudaSaysWhetherARunCanBeCaptured) {
  const std::vector<BackendCaps> catalog = backendCatalog();
  if (std::none_of(catalog.begin(), catalog.end(),
                   [](const BackendCaps& c) { return c.name == "nccl"; }))
    GTEST_SKIP() << "this build has no nccl backend (no CUDA)";
  CommandResult ok = hir({"check", example("alltoall.json"), "--world", "2", "--device", "cuda"});
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("hir: graph capture (--graph): possible: every rank captures the same "
                        "communications in the same order (2 per run over all ranks"),
            std::string::npos)
      << ok.out;
  CommandResult blocked =
      hir({"check", example("allreduce.json"), "--world", "2", "--device", "cuda"});
  ASSERT_EQ(blocked.exit_code, 0) << blocked.err;
  EXPECT_NE(blocked.out.find("hir: graph capture (--graph): not possible: /body/16: on rank 0: "
                             "waits on 'ar_prod' in host mode"),
            std::string::npos)
      << blocked.out;
  // ipc is capturable: its message numbers are counted on the device.
  CommandResult ipc =
      hir({"check", example("ring_exchange_ipc.json"), "--world", "2", "--device", "cuda"});
  ASSERT_EQ(ipc.exit_code, 0) << ipc.err;
  EXPECT_NE(ipc.out.find("hir: graph capture (--graph): possible"), std::string::npos) << ipc.out;
  // On the host device (no graphs) the line is left out.
  CommandResult host = hir({"check", example("alltoall.json"), "--world", "2"});
  EXPECT_EQ(host.out.find("graph capture"), std::string::npos) << host.out;
}

}  // namespace
}  // namespace hir::test
