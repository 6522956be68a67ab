// The table of `hir`'s flags (csrc/tools/cli.h) against what it drives:
// each command's --help, docs/cli.md, the checks every flag gets, and the
// command line that the launcher of `run --np` and `sweep --np` passes on
// to the ranks.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <hostir/error.h>

#include "support/test_util.h"
#include "tools/cli.h"

namespace hir::test {
namespace {

namespace fs = std::filesystem;

// The names of a flag: "-n,--np" -> {"-n", "--np"}.
std::vector<std::string> namesOf(const Flag& flag) {
  std::vector<std::string> out;
  std::stringstream in(flag.names);
  for (std::string name; std::getline(in, name, ',');) out.push_back(name);
  return out;
}

std::vector<std::string> commandsOf(const Flag& flag) {
  std::vector<std::string> out;
  const auto names = commandNames();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (flag.commands & (1u << i)) out.push_back(names[i]);
  return out;
}

// `name` as a word of `text`: not part of a longer flag ("-n" is not in
// "--np").
bool mentions(const std::string& text, const std::string& name) {
  const std::regex word("(^|[^-A-Za-z0-9_])" + name + "([^-A-Za-z0-9_]|$)");
  return std::regex_search(text, word);
}

CommandResult hir(std::vector<std::string> args) {
  args.insert(args.begin(), hirBinary());
  return runCommand(args, 60);
}

// parseArgs as main() calls it, on `args` after "hir".
Args parse(std::vector<std::string> args) {
  args.insert(args.begin(), "hir");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Args a;
  EXPECT_EQ(parseArgs(static_cast<int>(argv.size()), argv.data(), a), -1);
  return a;
}

// The message of the UsageError that parsing `args` throws ("" if none).
std::string usageError(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// What each command needs besides its flag under test.
std::vector<std::string> requiredArgs(const std::string& command) {
  std::vector<std::string> out = {command, examplesDir() + "/allreduce.json"};
  for (const Flag& flag : flagTable())
    for (const std::string& c : commandsOf(flag))
      if (c == command && flag.required)
        out.insert(out.end(), {flagName(flag), flagName(flag) == "--param-size" ? "n" : "8"});
  return out;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("hir_flags_" + std::to_string(getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

TEST(HirFlags, NoCommandDefinesAFlagNameTwice) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const Flag& flag : flagTable()) {
    EXPECT_NE(flag.commands, 0u) << flag.names;
    EXPECT_NE(flag.apply, nullptr) << flag.names;
    EXPECT_EQ(flagName(flag).rfind("--", 0), 0u) << flag.names << ": the last name is the long one";
    for (const std::string& command : commandsOf(flag))
      for (const std::string& name : namesOf(flag))
        EXPECT_TRUE(seen.insert({command, name}).second) << command << " " << name;
  }
}

// A default goes through the flag's own check, as a given value does.
TEST(HirFlags, EveryDefaultIsAValueItsFlagAccepts) {
  for (const Flag& flag : flagTable()) {
    if (flag.fallback == nullptr) continue;
    Args a;
    EXPECT_NO_THROW(flag.apply(a, flagName(flag), flag.fallback)) << flag.names;
    EXPECT_NE(flagHelp(flag).find(std::string("(default ") + flag.fallback + ")"),
              std::string::npos)
        << flag.names;
  }
}

TEST(HirFlags, EveryFlagIsInItsCommandsHelp) {
  for (const char* command : commandNames()) {
    CommandResult r = hir({command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << command << ": " << r.err;
    for (const Flag& flag : flagTable()) {
      const std::vector<std::string> of = commandsOf(flag);
      if (std::find(of.begin(), of.end(), command) == of.end()) continue;
      for (const std::string& name : namesOf(flag))
        EXPECT_TRUE(mentions(r.out, name)) << "hir " << command << " --help lacks " << name;
      EXPECT_NE(r.out.find(flagHelp(flag)), std::string::npos)
          << "hir " << command << " --help lacks the help of " << flag.names << ":\n" << r.out;
    }
  }
}

// docs/cli.md names each flag of a command in the command's synopsis (the
// first code block) or in its section ("## run").
TEST(HirFlags, EveryFlagIsInDocsCliMd) {
  const std::string doc = readFile(sourceDir() + "/docs/cli.md");
  const std::size_t open = doc.find("```\n"), close = doc.find("```\n", open + 4);
  ASSERT_NE(close, std::string::npos);
  std::map<std::string, std::string> synopsis, section;
  std::string current;
  std::istringstream block(doc.substr(open + 4, close - open - 4));
  for (std::string line; std::getline(block, line);) {
    if (line.rfind("hir ", 0) == 0) current = line.substr(4, line.find(' ', 4) - 4);
    else if (line.empty() || line[0] != ' ') current.clear();
    if (!current.empty()) synopsis[current] += line + "\n";
  }
  for (const char* command : commandNames()) {
    const std::size_t at = doc.find(std::string("\n## ") + command + "\n");
    ASSERT_NE(at, std::string::npos) << "docs/cli.md has no section '## " << command << "'";
    section[command] = doc.substr(at, doc.find("\n## ", at + 1) - at);
  }
  for (const Flag& flag : flagTable())
    for (const std::string& command : commandsOf(flag))
      for (const std::string& name : namesOf(flag))
        EXPECT_TRUE(mentions(synopsis[command], name) || mentions(section[command], name))
            << "docs/cli.md: neither the synopsis of `hir " << command << "` nor its section "
            << "names " << name;
}

// What a command that takes one value per flag does with it twice.
TEST(HirFlags, AFlagOfOneValueGivenTwiceIsBadUsage) {
  for (const Flag& flag : flagTable()) {
    if (flag.arity == Arity::kMany) continue;
    for (const std::string& command : commandsOf(flag)) {
      std::vector<std::string> args = requiredArgs(command);
      for (int i = 0; i < 2; ++i) {
        args.push_back(flagName(flag));
        if (flag.arity == Arity::kOne) args.push_back("x");
      }
      EXPECT_NE(usageError(args).find(flagName(flag) + " given twice"), std::string::npos)
          << command << " " << flag.names;
    }
  }
}

TEST(HirFlags, ARequiredFlagLeftOutIsNamedForItsCommand) {
  for (const Flag& flag : flagTable()) {
    if (!flag.required) continue;
    for (const std::string& command : commandsOf(flag)) {
      std::vector<std::string> args = requiredArgs(command);
      const auto at = std::find(args.begin(), args.end(), flagName(flag));
      args.erase(at, at + 2);
      std::string names = flag.names;
      std::replace(names.begin(), names.end(), ',', '/');
      EXPECT_NE(usageError(args).find("`hir " + command + "` needs " + names + " " + flag.type),
                std::string::npos)
          << usageError(args);
    }
  }
}

// A value for every flag of run and sweep, as a test would give it. A new
// flag needs one here.
std::map<std::string, std::string> sampleValues(const TempDir& dir) {
  std::ofstream(dir.file("hosts")) << "localhost slots=4\n";
  return {{"--iters", "2"},           {"--warmup", "1"},
          {"--np", "2"},              {"--device", "host"},
          {"--param", "n=64"},        {"--timeout", "60"},
          {"--no-schedule-check", ""}, {"--plugin", HIR_EXAMPLE_PLUGIN},
          {"--mpirun-args", "--mca btl self"}, {"--hostfile", dir.file("hosts")},
          {"--no-progress", ""},      {"--symmetric-memory", "off"},
          {"--graph", ""},            {"--trace", dir.file("t.json")},
          {"--json", dir.file("r.json")}, {"--csv", dir.file("s.csv")},
          {"--param-size", "n"},      {"--minbytes", "8"},
          {"--maxbytes", "64"},       {"--stepfactor", "4"},
          {"--param-unit", "bytes"}};
}

// The command line of `command` with every flag it takes (but those in
// `leave_out`) at its sample value, in the --name=value form the ranks get
// (--name for a switch).
std::vector<std::string> withEveryFlag(const std::string& command, const std::string& program,
                                       const std::map<std::string, std::string>& samples,
                                       const std::set<std::string>& leave_out) {
  std::vector<std::string> args = {command, program};
  for (const Flag& flag : flagTable()) {
    const std::vector<std::string> of = commandsOf(flag);
    if (std::find(of.begin(), of.end(), command) == of.end()) continue;
    const std::string name = flagName(flag);
    if (leave_out.count(name)) continue;
    const auto sample = samples.find(name);
    if (sample == samples.end()) {
      ADD_FAILURE() << name << " of `hir " << command << "` has no sample value in this test";
      continue;
    }
    args.push_back(flag.arity == Arity::kSwitch ? name : name + "=" + sample->second);
  }
  return args;
}

// What the launcher passes on is every flag given whose row says the ranks
// receive it, as given, and none of the launcher's own; and a rank that
// parses it gets what the launcher parsed.
TEST(HirFlags, TheRanksReceiveTheirFlagsAndNotTheLaunchers) {
  TempDir dir;
  const auto samples = sampleValues(dir);
  const std::string program = sourceDir() + "/tests/tools/data/allreduce_sized.json";
  for (const char* command : {"run", "sweep"}) {
    // --graph excludes --no-schedule-check and --trace: on its own. (A
    // sweep sets its param itself: no --param.)
    std::set<std::string> leave_out = {"--graph"};
    if (std::string(command) == "sweep") leave_out.insert("--param");
    const std::vector<std::string> args = withEveryFlag(command, program, samples, leave_out);
    const Args a = parse(args);
    std::vector<std::string> with_graph = requiredArgs(command);
    with_graph.push_back("--graph");
    const Args graph = parse(with_graph);
    std::set<std::string> forwarded(a.forwarded.begin(), a.forwarded.end());
    forwarded.insert(graph.forwarded.begin(), graph.forwarded.end());
    for (const Flag& flag : flagTable()) {
      const std::vector<std::string> of = commandsOf(flag);
      if (std::find(of.begin(), of.end(), command) == of.end()) continue;
      const std::string name = flagName(flag);
      bool seen = false;
      for (const std::string& f : forwarded) seen |= f == name || f.rfind(name + "=", 0) == 0;
      const bool given = !leave_out.count(name) || name == "--graph";
      if (flag.to_ranks && given)
        EXPECT_TRUE(seen) << command << ": the ranks do not receive " << name;
      if (!flag.to_ranks) EXPECT_FALSE(seen) << command << ": the ranks receive " << name;
    }
    for (const std::string& f : a.forwarded)
      EXPECT_NE(std::find(args.begin(), args.end(), f), args.end()) << f << " was not given so";

    std::vector<std::string> rank = {command};
    rank.insert(rank.end(), a.forwarded.begin(), a.forwarded.end());
    rank.insert(rank.end(), {"--", program});
    const Args r = parse(rank);
    EXPECT_EQ(r.np, std::nullopt);
    EXPECT_EQ(r.device, a.device);
    EXPECT_EQ(r.params, a.params);
    EXPECT_EQ(r.iters, a.iters);
    EXPECT_EQ(r.warmup, a.warmup);
    EXPECT_EQ(r.timeout_ms, a.timeout_ms);
    EXPECT_EQ(r.schedule_check, a.schedule_check);
    EXPECT_EQ(r.trace, a.trace);
    EXPECT_EQ(r.json, a.json);
    EXPECT_EQ(r.progress, a.progress);
    EXPECT_EQ(r.symmetric, a.symmetric);
    EXPECT_EQ(r.plugins, a.plugins);
    EXPECT_EQ(r.sweep.param, a.sweep.param);
    EXPECT_EQ(r.sweep.min_bytes, a.sweep.min_bytes);
    EXPECT_EQ(r.sweep.max_bytes, a.sweep.max_bytes);
    EXPECT_EQ(r.sweep.factor, a.sweep.factor);
    EXPECT_EQ(r.sweep.unit, a.sweep.unit);
    EXPECT_EQ(r.sweep.csv, a.sweep.csv);
    EXPECT_TRUE(r.mpirun_args.empty());
    EXPECT_TRUE(r.hostfile.empty());
  }
}

// The launcher puts that command line, as parsed, on mpirun's: after the
// command and before `-- PROG` (a fake mpirun records it).
TEST(HirFlags, TheLaunchersCommandLineCarriesTheForwardedFlags) {
  TempDir dir;
  const auto samples = sampleValues(dir);
  const std::string program = sourceDir() + "/tests/tools/data/allreduce_sized.json";
  const std::vector<std::string> args =
      withEveryFlag("run", program, samples, {"--graph", "--mpirun-args"});
  const Args a = parse(args);
  std::vector<std::string> argv = {"env",
                                   "HIR_MPIRUN=sh " + sourceDir() +
                                       "/tests/tools/data/fake_mpirun.sh",
                                   "HIR_FAKE_MPIRUN_ARGV=" + dir.file("argv"), hirBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = runCommand(argv, 60);
  // The fake starts no rank, which hir reports (exit 3).
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  std::vector<std::string> words;
  std::istringstream in(readFile(dir.file("argv")));
  for (std::string w; std::getline(in, w);) words.push_back(w);
  const auto run = std::find(words.begin(), words.end(), "run");
  ASSERT_NE(run, words.end()) << r.err;
  std::vector<std::string> expected = a.forwarded;
  expected.insert(expected.end(), {"--", program});
  EXPECT_EQ(std::vector<std::string>(run + 1, words.end()), expected);
}

// An output that names the program, a plugin, the hostfile or another
// output is refused before anything runs, whatever spelling reaches it
// (issue 40: --json PROG replaced the program and exited 0).
TEST(HirFlags, AnOutputThatIsAnInputOrAnotherOutputIsRefused) {
  TempDir dir;
  const std::string prog = dir.file("prog.json");
  fs::copy_file(examplesDir() + "/allreduce.json", prog);
  const std::string plugin = dir.file("libk.so");
  std::ofstream(plugin) << "not loaded by parsing";
  std::ofstream(dir.file("hosts")) << "localhost slots=4\n";
  fs::create_directories(dir.file("sub"));
  const std::string other = dir.file("sub") + "/../prog.json";  // prog, spelled otherwise
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"run", prog, "--json", prog}, "--json '{P}' is the program '{P}'"},
      {{"run", prog, "--trace", other}, "is the program"},
      {{"sweep", prog, "--param-size", "n", "-b", "8", "--csv", prog}, "--csv '{P}' is the program"},
      {{"sweep", prog, "--param-size", "n", "-b", "8", "--json", prog}, "is the program"},
      {{"run", prog, "--plugin", plugin, "--json", plugin}, "is --plugin"},
      {{"run", prog, "--hostfile", dir.file("hosts"), "--np", "2", "--trace", dir.file("hosts")},
       "is --hostfile"},
      {{"run", prog, "--trace", dir.file("out"), "--json", dir.file("out")},
       "are the same file"},
      {{"sweep", prog, "--param-size", "n", "-b", "8", "--json", dir.file("o"), "--csv",
        dir.file("sub") + "/../o"},
       "are the same file"},
  };
  for (const auto& c : cases) {
    std::string expected = c.message;
    for (auto at = expected.find("{P}"); at != std::string::npos; at = expected.find("{P}"))
      expected.replace(at, 3, prog);
    const std::string message = usageError(c.args);
    EXPECT_NE(message.find(expected), std::string::npos)
        << "hir " << ::testing::PrintToString(c.args) << ": " << message;
  }
  // Through the binary: exit 2, and the program is whole.
  const std::string before = readFile(prog);
  const CommandResult r = hir({"run", prog, "--json", prog});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(readFile(prog), before);
  // Distinct outputs, and standard output for one of them, pass.
  EXPECT_EQ(usageError({"run", prog, "--trace", dir.file("t.json"), "--json", "-"}), "");
}

// An output that is not a regular file (a FIFO with no reader would block
// for ever; a device is not a result file), a name the system cannot take,
// and a plugin that is a FIFO are usage errors before anything runs.
TEST(HirFlags, AnOutputThatCannotBeAFileIsRefusedUpFront) {
  TempDir dir;
  const std::string prog = examplesDir() + "/allreduce.json";
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string long_path = dir.file(std::string(5000, 'x'));
  const std::string long_name = dir.file(std::string(300, 'y'));
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"run", prog, "--json", fifo}, "it is a FIFO (writing it would wait for a reader"},
      {{"run", prog, "--trace", fifo}, "it is a FIFO"},
      {{"sweep", prog, "--param-size", "n", "-b", "8", "--csv", fifo}, "it is a FIFO"},
      {{"run", prog, "--json", "/dev/null"}, "it is a character device"},
      {{"run", prog, "--json", dir.file("")}, "it is a directory"},
      {{"run", prog, "--plugin", fifo}, "--plugin: cannot load '" },
      {{"run", prog, "--json", long_path}, "the file name is "},
      {{"run", prog, "--trace", long_name}, "is a name of 300 characters"},
      {{"run", prog, "--trace", "-"}, "--trace writes a file, not standard output"},
  };
  for (const auto& c : cases) {
    const std::string message = usageError(c.args);
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "hir " << ::testing::PrintToString(c.args).substr(0, 200) << ": " << message;
  }
  const CommandResult r = hir({"run", prog, "--json", fifo, "--timeout", "5"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
}

}  // namespace
}  // namespace hir::test
