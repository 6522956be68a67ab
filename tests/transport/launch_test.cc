// The command line `hir run --np N` gives its launcher (transport/launch.h):
// shell-like splitting of --mpirun-args and HIR_MPIRUN, --hostfile, the
// variables exported to the ranks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <hostir/error.h>

#include "transport/launch.h"

namespace hir {
namespace {

using Words = std::vector<std::string>;

// Sets or unsets a variable for one test, restoring it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(SplitShellWords, SplitsAtBlanksAndKeepsQuotedText) {
  EXPECT_EQ(splitShellWords("--mca btl self,tcp", "x"), (Words{"--mca", "btl", "self,tcp"}));
  EXPECT_EQ(splitShellWords("  a\t b \n", "x"), (Words{"a", "b"}));
  EXPECT_EQ(splitShellWords("-x 'A=1 2' \"B=$C\"", "x"), (Words{"-x", "A=1 2", "B=$C"}));
  EXPECT_EQ(splitShellWords("a\"b c\"'d'", "x"), (Words{"ab cd"}));
  EXPECT_EQ(splitShellWords("'' \"\"", "x"), (Words{"", ""}));
  EXPECT_EQ(splitShellWords("a\\ b \\'c", "x"), (Words{"a b", "'c"}));
  EXPECT_EQ(splitShellWords(R"("a\"b\\c\d")", "x"), (Words{R"(a"b\c\d)"}));
  EXPECT_EQ(splitShellWords("'a\\b'", "x"), (Words{"a\\b"}));
  EXPECT_TRUE(splitShellWords("   ", "x").empty());
}

TEST(SplitShellWords, AnUnbalancedQuoteNamesTheFlag) {
  for (const char* text : {"--mca btl 'self", "\"a", "a\\"}) {
    try {
      splitShellWords(text, "--mpirun-args");
      ADD_FAILURE() << text << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--mpirun-args: ", 0), 0u) << e.what();
    }
  }
  try {
    splitShellWords("--mca btl 'self", "--mpirun-args");
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--mpirun-args: unbalanced single quote at character 11 of '--mca btl 'self'");
  }
}

TEST(LauncherCommand, IsMpirunItsOptionsThenThePassThroughWordsThenTheRank) {
  ScopedEnv mpirun("HIR_MPIRUN", "/opt/ompi/bin/mpirun --mca btl 'self,tcp'");
  ScopedEnv quiet("HIR_MPIRUN_QUIET", nullptr);
  ScopedEnv launched("HIR_LAUNCHED_NP", "4");
  ScopedEnv log("HIR_LOG", "info");
  LaunchOptions o;
  o.np = 4;
  o.mpirun_args = {"--map-by", "node"};
  o.hostfile = "hosts.txt";
  const Words cmd = launcherCommand(o, "/x/hir", {"run", "--", "p.json"});
  Words expected = {"/opt/ompi/bin/mpirun", "--mca", "btl", "self,tcp", "-np", "4",
                    "--oversubscribe", "--bind-to", "none", "-q"};
  if (geteuid() == 0) expected.push_back("--allow-run-as-root");
  for (const char* w : {"--hostfile", "hosts.txt"}) expected.push_back(w);
  // Every HIR_* variable but the launcher's own, sorted, as -x NAME.
  auto x = std::find(cmd.begin(), cmd.end(), "-x");
  ASSERT_NE(x, cmd.end());
  ASSERT_EQ(Words(cmd.begin(), x), expected);
  Words exported;
  auto it = x;
  while (it != cmd.end() && *it == "-x") {
    exported.push_back(*(it + 1));
    it += 2;
  }
  EXPECT_TRUE(std::is_sorted(exported.begin(), exported.end()));
  EXPECT_NE(std::find(exported.begin(), exported.end(), "HIR_LAUNCHED_NP"), exported.end());
  EXPECT_NE(std::find(exported.begin(), exported.end(), "HIR_LOG"), exported.end());
  EXPECT_EQ(std::find(exported.begin(), exported.end(), "HIR_MPIRUN"), exported.end());
  EXPECT_EQ(Words(it, cmd.end()), (Words{"--map-by", "node", "/x/hir", "run", "--", "p.json"}));
}

TEST(LauncherCommand, QuietCanBeTurnedOffAndTheDefaultIsMpirun) {
  ScopedEnv mpirun("HIR_MPIRUN", nullptr);
  ScopedEnv quiet("HIR_MPIRUN_QUIET", "0");
  const Words cmd = launcherCommand(LaunchOptions{2, {}, ""}, "/x/hir", {"run"});
  EXPECT_EQ(cmd.front(), "mpirun");
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "-q"), cmd.end());
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "--hostfile"), cmd.end());
}

TEST(LauncherCommand, AnEmptyOrUnbalancedHirMpirunIsBadUsage) {
  {
    ScopedEnv mpirun("HIR_MPIRUN", "  ");
    EXPECT_THROW(launcherCommand(LaunchOptions{}, "/x/hir", {}), UsageError);
  }
  ScopedEnv mpirun("HIR_MPIRUN", "mpirun --mca \"btl");
  try {
    launcherCommand(LaunchOptions{}, "/x/hir", {});
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("HIR_MPIRUN: unbalanced double quote", 0), 0u)
        << e.what();
  }
}

TEST(CheckHostfile, AMissingFileOrAFolderIsBadUsage) {
  try {
    checkHostfile("/nonexistent/hosts");
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--hostfile '/nonexistent/hosts': No such file or directory");
  }
  EXPECT_THROW(checkHostfile("/tmp"), UsageError);
  EXPECT_THROW(checkHostfile(""), UsageError);
  EXPECT_NO_THROW(checkHostfile("/proc/self/status"));
}

}  // namespace
}  // namespace hir
