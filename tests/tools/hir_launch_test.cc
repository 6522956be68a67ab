// How `hir run` is launched: the command line it gives mpirun (recorded by
// a fake launcher), --mpirun-args and HIR_MPIRUN split into words,
// --hostfile, a real run with pass-through arguments, and ranks started by
// torchrun's variables (the TCP bootstrap).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace hir::test {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CommandResult shell(const std::string& command, int timeout_s = 180) {
  return runCommand({"sh", "-c", command}, timeout_s);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// A folder of its own for one test, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / (name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& file) const { return (path_ / file).string(); }

 private:
  fs::path path_;
};

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

const std::string kFakeMpirun = sourceDir() + "/tests/tools/data/fake_mpirun.sh";

// The launcher's words come from HIR_MPIRUN, hir's own options, the
// hostfile, the exported HIR_* variables and --mpirun-args, in this order,
// then the rank's command.
TEST(HirLaunch, TheLauncherGetsHirMpirunsWordsTheHostfileAndThePassThroughArguments) {
  TempDir tmp("hir_launch_argv");
  const std::string hosts = tmp / "hosts";
  std::ofstream(hosts) << "localhost slots=4\n";
  const std::string prog = examplesDir() + "/allreduce.json";
  CommandResult r = shell(
      "HIR_MPIRUN=" + quoted("sh " + kFakeMpirun + " --mca btl 'self,tcp'") +
      " HIR_FAKE_MPIRUN_ARGV=" + quoted(tmp / "argv") + " " + quoted(hirBinary()) + " run " +
      quoted(prog) + " --np 3 --device host --hostfile " + quoted(hosts) +
      " --mpirun-args " + quoted("--map-by 'ppr:1:node' --mca plm_rsh_args \"-p 2222\""));
  // The fake starts no rank, which hir reports (exit 3) though it exits 0.
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("mpirun ended (mpirun exit 0) before any rank started"), std::string::npos)
      << r.err;
  const std::vector<std::string> argv = lines(readFile(tmp / "argv"));
  std::vector<std::string> head = {"--mca", "btl", "self,tcp", "-np", "3", "--oversubscribe",
                                   "--bind-to", "none", "-q"};
  if (geteuid() == 0) head.push_back("--allow-run-as-root");
  head.push_back("--hostfile");
  head.push_back(hosts);
  ASSERT_GE(argv.size(), head.size()) << r.err;
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + head.size()), head);
  std::size_t i = head.size();
  std::vector<std::string> exported;
  for (; i + 1 < argv.size() && argv[i] == "-x"; i += 2) exported.push_back(argv[i + 1]);
  for (const char* name : {"HIR_FAKE_MPIRUN_ARGV", "HIR_LAUNCHED_NP", "HIR_RANK_REPORTS"})
    EXPECT_NE(std::find(exported.begin(), exported.end(), name), exported.end()) << name;
  EXPECT_EQ(std::find(exported.begin(), exported.end(), "HIR_MPIRUN"), exported.end());
  const std::vector<std::string> rest(argv.begin() + i, argv.end());
  ASSERT_GE(rest.size(), 9u);
  EXPECT_EQ(std::vector<std::string>(rest.begin(), rest.begin() + 5),
            (std::vector<std::string>{"--map-by", "ppr:1:node", "--mca", "plm_rsh_args",
                                      "-p 2222"}));
  EXPECT_EQ(fs::canonical(rest[5]), fs::canonical(hirBinary()));
  EXPECT_EQ(rest[6], "run");
  EXPECT_NE(std::find(rest.begin(), rest.end(), "--device=host"), rest.end());
  EXPECT_EQ(rest[rest.size() - 2], "--");
  EXPECT_EQ(rest.back(), prog);
  // Launcher options are not passed on to the ranks.
  for (const std::string& word : rest)
    EXPECT_EQ(word.find("--hostfile"), std::string::npos) << word;
}

TEST(HirLaunch, BadLauncherOptionsAreBadUsageNamingThem) {
  const std::string bin = quoted(hirBinary());
  const std::string prog = quoted(examplesDir() + "/allreduce.json");
  CommandResult unbalanced =
      shell(bin + " run " + prog + " --np 2 --mpirun-args " + quoted("--mca 'btl self"));
  EXPECT_EQ(unbalanced.exit_code, 2) << unbalanced.err;
  EXPECT_NE(unbalanced.err.find("hir: error: --mpirun-args: unbalanced single quote at "
                                "character 7 of '--mca 'btl self'"),
            std::string::npos)
      << unbalanced.err;

  CommandResult env = shell("HIR_MPIRUN=" + quoted("mpirun \"--mca") + " " + bin + " run " +
                            prog + " --np 2 --device host");
  EXPECT_EQ(env.exit_code, 2) << env.err;
  EXPECT_NE(env.err.find("hir: error: HIR_MPIRUN: unbalanced double quote"), std::string::npos)
      << env.err;

  CommandResult missing = shell(bin + " run " + prog + " --np 2 --hostfile /nonexistent/hosts");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("hir: error: --hostfile '/nonexistent/hosts': No such file or "
                             "directory"),
            std::string::npos)
      << missing.err;

  CommandResult alone = shell(bin + " run " + prog + " --device host --hostfile /proc/self/status");
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_NE(alone.err.find("hir: error: --hostfile is for the launcher: it needs --np N"),
            std::string::npos)
      << alone.err;

  // What every rank would refuse, the launcher refuses first (issue 40: a
  // bad HIR_FAKE_NODES was exit 3, "mpirun ended before any rank started").
  CommandResult fake = shell("HIR_FAKE_NODES=two " + bin + " run " + prog + " --np 2");
  EXPECT_EQ(fake.exit_code, 2) << fake.err;
  EXPECT_NE(fake.err.find("hir: error: HIR_FAKE_NODES must be a positive integer (the number of "
                          "fake nodes), got 'two'"),
            std::string::npos)
      << fake.err;

  // --graph on the host names the device, not a node of the program that
  // the host's backends cannot capture.
  CommandResult graph = shell(bin + " run " + prog + " --np 2 --device host --graph");
  EXPECT_EQ(graph.exit_code, 2) << graph.err;
  EXPECT_NE(graph.err.find("hir: error: --graph needs a device with graphs (cuda); device 'host' "
                           "has none"),
            std::string::npos)
      << graph.err;
}

// The real mpirun with words of its own in HIR_MPIRUN and pass-through
// arguments.
TEST(HirLaunch, ARealRunTakesPassThroughArguments) {
  CommandResult r = shell("HIR_MPIRUN=" + quoted("mpirun --mca btl self,vader") + " " +
                          quoted(hirBinary()) + " run " +
                          quoted(examplesDir() + "/allreduce.json") +
                          " --np 2 --device host --mpirun-args " +
                          quoted("--mca btl_vader_single_copy_mechanism none"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("hir: ok: 'allreduce' on 2 ranks"), std::string::npos) << r.out;
}

struct RankResult {
  int exit_code = -1;
  std::string out, err;
};

// `world` processes of hir started as torchrun starts its workers: RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and no
// MPI variable.
std::vector<RankResult> asTorchrun(int world, const std::string& prog, const TempDir& tmp) {
  std::string script = "pids=''; for r in";
  for (int r = 0; r < world; ++r) script += " " + std::to_string(r);
  script += "; do RANK=$r WORLD_SIZE=" + std::to_string(world) + " LOCAL_RANK=$r " +
            "LOCAL_WORLD_SIZE=" + std::to_string(world) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
            std::to_string(freePort()) + " " + quoted(hirBinary()) + " run " + quoted(prog) +
            " --device host --timeout 30 > " + quoted(tmp / "out.") + "$r 2> " +
            quoted(tmp / "err.") + "$r & pids=\"$pids $!\"; done; r=0; for p in $pids; do " +
            "wait $p; echo $? > " + quoted(tmp / "code.") + "$r; r=$((r + 1)); done";
  CommandResult run = shell(script, 120);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<RankResult> out(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const std::string n = std::to_string(r);
    out[r].exit_code = std::stoi(readFile(tmp / ("code." + n)));
    out[r].out = readFile(tmp / ("out." + n));
    out[r].err = readFile(tmp / ("err." + n));
  }
  return out;
}

TEST(HirLaunch, UnderTorchrunAProgramWithoutCommunicationRunsOnEveryRank) {
  TempDir tmp("hir_torchrun_local");
  const auto ranks = asTorchrun(3, sourceDir() + "/tests/tools/data/local_only.json", tmp);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks[r].exit_code, 0) << "rank " << r << ranks[r].err;
  EXPECT_NE(ranks[0].out.find("hir: ok: 'local_only' on 3 ranks"), std::string::npos)
      << ranks[0].out;
  EXPECT_EQ(ranks[1].out, "");
}

// The host device has no backend between processes without MPI: refused
// at load by every rank (exit 2), said once by rank 0.
TEST(HirLaunch, UnderTorchrunHostCommunicationsAreRefusedInOneLine) {
  TempDir tmp("hir_torchrun_comms");
  const auto ranks = asTorchrun(2, examplesDir() + "/allreduce.json", tmp);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ranks[r].exit_code, 2) << "rank " << r << ranks[r].err;
  const std::vector<std::string> err = lines(ranks[0].err);
  ASSERT_FALSE(err.empty());
  EXPECT_NE(err[0].find("communicates between ranks, and on the host device only MPI carries "
                        "communications between processes; under torchrun there is none: start "
                        "the ranks with mpirun (hir run --np N) or use --device cuda"),
            std::string::npos)
      << ranks[0].err;
  EXPECT_EQ(err[0].rfind("hir: error: /body/", 0), 0u) << err[0];
  EXPECT_EQ(ranks[1].err, "");
}

}  // namespace
}  // namespace hir::test
