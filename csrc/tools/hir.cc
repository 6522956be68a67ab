// The `hir` command: run, sweep, check and print hostir programs.
// Exit codes (docs/cli.md): 0 ok, 1 a check failed, 2 bad usage or bad
// program, 3 runtime failure (timeout, device or library error), 4 bug.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/backend.h>
#include <hostir/bootstrap.h>
#include <hostir/device.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/printer.h>
#include <hostir/session.h>
#include <hostir/version.h>

#include "common/check.h"
#include "common/parse_int.h"
#include "compile/compile.h"
#include "device/gpus.h"
#include "runtime/trace.h"
#include "tools/program_input.h"
#include "tools/run_output.h"
#include "tools/sweep.h"
#include "transport/launch.h"
#include "transport/launch_report.h"

namespace hir {
namespace {

constexpr const char* kDescription =
    "Runs hostir programs (JSON, format hostir/1) on GPUs or on the host.\n";

constexpr const char* kMainFooter =
    R"(`hir <command> --help` describes each command (docs/cli.md: all of them).
exit codes: 0 ok, 1 a check failed, 2 bad usage or bad program,
            3 runtime failure (timeout, device or library error), 4 internal error)";

constexpr const char* kProgHelp = "the program: a JSON file, or - for standard input";

struct Args {
  std::string command;
  std::string program;  // a path, or "-": standard input
  std::optional<int> np;
  std::optional<int> world;
  std::string device = "auto";
  std::vector<std::pair<std::string, int64_t>> params;
  int iters = 1;
  int warmup = 0;
  int64_t timeout_ms = 300000;
  bool schedule_check = true;
  std::string trace;  // --trace FILE
  std::string json;   // --json FILE ("-": standard output)
  bool progress = true;  // --no-progress: false
  bool graph = false;    // --graph
  EvaluatorOptions::Symmetric symmetric = EvaluatorOptions::Symmetric::Auto;  // --symmetric-memory
  SweepOptions sweep;    // `hir sweep` (iters and warmup above)
  std::vector<std::string> plugins;  // --plugin LIB, in order
  std::vector<std::string> mpirun_args;  // --mpirun-args, split into words (launcher only)
  std::string hostfile;                  // --hostfile FILE (launcher only)
  // What each rank started by --np gets after `run`, in --flag=value form:
  // every option given but --np; launchRanks adds `-- PROG`.
  std::vector<std::string> forwarded;
};

int parseCount(const std::string& flag, const std::string& text, int min) {
  return static_cast<int>(parseInteger(flag, text, min, INT_MAX));
}

// Seconds, fractional allowed, kept to the millisecond: in [0.001, 1e9].
int64_t parseSecondsAsMs(const std::string& flag, const std::string& text) {
  constexpr double kMin = 0.001, kMax = 1e9;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || std::isnan(v) ||
      std::isspace(static_cast<unsigned char>(text[0])))
    throw UsageError(fmt::format("{} expects a number of seconds, got '{}'", flag, text));
  if (errno == ERANGE || !(v >= kMin && v <= kMax))
    throw UsageError(fmt::format("{} must be in [{}, {}] seconds, got {}", flag, kMin, kMax, text));
  return std::llround(v * 1000.0);
}

// Fails before anything runs when --trace names a file in a folder that
// cannot be written (writeTrace says so again if writing fails later).
void checkTraceTarget(const std::string& path) {
  if (path.empty()) throw UsageError("--trace expects a file name");
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (access(dir.c_str(), W_OK) != 0)
    throw UsageError(fmt::format("cannot write the trace to '{}': {}: {}", path, dir,
                                 std::strerror(errno)));
}

// The command line as CLI11 leaves it: every value still text, converted
// and range-checked by parseArgs. (CLI11's own integer conversion differs
// between versions: 2.1 clamps an overflowing 64-bit value silently, reads
// "010" as octal; 2.4 also takes "1_000".)
struct RawArgs {
  std::string mpirun_args, hostfile;  // run: the launcher's
  std::string program, np, world, device, iters, warmup, timeout, trace, json, symmetric;
  std::string param_size, minbytes, maxbytes, stepfactor, param_unit, csv;  // sweep
  std::vector<std::string> params, plugins;
  bool no_schedule_check = false, no_progress = false, graph = false;
};

// An option that takes one value: given twice, it is an error (parseArgs
// checks the count; TakeLast only keeps CLI11 from failing first with its
// own message).
CLI::Option* addSingle(CLI::App* cmd, const std::string& name, std::string& into,
                       const std::string& type, const std::string& help) {
  return cmd->add_option(name, into, help)
      ->type_name(type)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// A repeatable option: one value per occurrence (`--param a=1 prog.json`
// leaves prog.json to the program).
CLI::Option* addRepeated(CLI::App* cmd, const std::string& name, std::vector<std::string>& into,
                         const std::string& type, const std::string& help) {
  return cmd->add_option(name, into, help)->type_name(type)->allow_extra_args(false);
}

// The checks CLI11 leaves to us, with messages that name the flag: what was
// left over (an unknown command or option, a second program) and an option
// given twice.
// The options `run` and `sweep` share: where and how the ranks run.
// `run` also takes mpirun's `-n N` for --np; `sweep` keeps `-n` for
// nccl-tests' iterations.
void addRunningOptions(CLI::App* cmd, RawArgs& raw, const char* check_when, bool short_np) {
  addSingle(cmd, short_np ? "-n,--np" : "--np", raw.np, "N",
            "number of ranks (default: the MPI job's size, or 1)");
  addSingle(cmd, "--device", raw.device, "D",
            "auto (default: cuda if a GPU is present, else host), cuda, host");
  addRepeated(cmd, "--param", raw.params, "K=V", "override a program param (repeatable)");
  addSingle(cmd, "--timeout", raw.timeout, "S",
            "seconds any host wait may take (default 300; fractions: 0.5)");
  cmd->add_flag("--no-schedule-check", raw.no_schedule_check,
                fmt::format("skip the cross-rank check {} (large loops)", check_when));
  addRepeated(cmd, "--plugin", raw.plugins, "LIB",
              "load a shared library of kernels first (repeatable)");
  addSingle(cmd, "--mpirun-args", raw.mpirun_args, "ARGS",
            "more arguments for mpirun under --np (split into words as a shell does)");
  addSingle(cmd, "--hostfile", raw.hostfile, "FILE",
            "mpirun's hostfile under --np: start the ranks on the nodes it lists");
  cmd->add_flag("--no-progress", raw.no_progress,
                "no progress line on standard error (shown for runs longer than 3 s)");
  addSingle(cmd, "--symmetric-memory", raw.symmetric, "MODE",
            "auto (default: on with --graph), on, off: collectives' buffers in NCCL's symmetric "
            "windows");
  cmd->add_flag("--graph", raw.graph,
                "capture run 2 into a CUDA graph and replay it on later runs (cuda; nccl and "
                "ipc; at least 2 warm-up runs)");
}

void checkLeftovers(CLI::App& app, CLI::App* cmd) {
  for (const std::string& extra : app.remaining()) {
    if (extra.size() > 1 && extra[0] == '-')
      throw UsageError(fmt::format("unknown option '{}'; see `hir --help`", extra));
    throw UsageError(fmt::format("unknown command '{}'; expected run, sweep, check or print",
                                 extra));
  }
  if (!cmd) throw UsageError("missing command; try `hir --help`");
  const std::string name = cmd->get_name();
  for (const std::string& extra : cmd->remaining()) {
    if (extra == "--") continue;  // the end of the options, before PROG
    if (extra.size() > 1 && extra[0] == '-')
      throw UsageError(fmt::format("unknown option '{}' for `hir {}`; see `hir {} --help`", extra,
                                   name, name));
    throw UsageError(fmt::format("unexpected argument '{}': one program at a time", extra));
  }
  for (const CLI::Option* opt : cmd->get_options())
    if (opt->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeLast && opt->count() > 1)
      throw UsageError(fmt::format("{} given twice", opt->get_name()));
}

void checkRequired(const Args& a) {
  if (a.program.empty())
    throw UsageError(fmt::format("`hir {}` needs a program file (or - for standard input)",
                                 a.command));
  if (a.command == "check" && !a.world)
    throw UsageError("`hir check` needs --world N (the world size to check for)");
  if (a.command == "sweep" && a.sweep.param.empty())
    throw UsageError("`hir sweep` needs --param-size NAME (the param that sets the size)");
  if (a.command == "sweep" && a.sweep.min_bytes == 0)
    throw UsageError("`hir sweep` needs -b/--minbytes SIZE (the first size, in bytes)");
}

// The options of `hir sweep` alone, into a.sweep (its --iters, --warmup,
// --json and --no-progress are parsed with run's).
template <class Given, class Forward>
void parseSweepArgs(const RawArgs& raw, Args& a, Given&& given, Forward&& forward) {
  SweepOptions& o = a.sweep;
  if (given("--param-size")) {
    if (raw.param_size.empty()) throw UsageError("--param-size expects a param name");
    o.param = raw.param_size;
    for (const auto& [name, value] : a.params)
      if (name == o.param)
        throw UsageError(fmt::format("--param {} and --param-size {}: the sweep sets {} itself",
                                     name, name, name));
  }
  forward("--param-size", raw.param_size);
  if (given("--minbytes")) o.min_bytes = parseSize("--minbytes", raw.minbytes);
  forward("--minbytes", raw.minbytes);
  o.max_bytes = given("--maxbytes") ? parseSize("--maxbytes", raw.maxbytes) : o.min_bytes;
  forward("--maxbytes", raw.maxbytes);
  if (given("--stepfactor")) o.factor = parseInteger("--stepfactor", raw.stepfactor, 2);
  forward("--stepfactor", raw.stepfactor);
  if (given("--param-unit")) o.unit = parseParamUnit(raw.param_unit);
  forward("--param-unit", raw.param_unit);
  if (given("--csv")) {
    o.csv = raw.csv;
    checkWritable("--csv", o.csv);
  }
  forward("--csv", raw.csv);
  if (o.csv == "-" && a.json == "-")
    throw UsageError("--json - and --csv -: only one of them can go to standard output");
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.json = a.json;
  o.progress = a.progress;
  o.graph = a.graph;
}

// Parses the command line into `a`. Returns -1 to go on, or the exit code
// when there is nothing more to do (help, version: 0). Bad usage throws a
// UsageError that names the flag or value.
int parseArgs(int argc, char** argv, Args& a) {
  CLI::App app{kDescription, "hir"};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.set_version_flag("-V,--version", std::string("hir ") + version(),
                       "print `hir <version>` and exit");
  app.require_subcommand(0, 1);
  app.allow_extras();  // checkLeftovers reports them, naming the command
  app.footer(kMainFooter);
  app.get_formatter()->column_width(28);
  RawArgs raw;

  CLI::App* run = app.add_subcommand("run", "run a program on every rank and verify its checks");
  run->footer(
      "With --np N outside an MPI job, hir checks PROG once for world size N, then starts N\n"
      "local ranks of itself through mpirun (N may exceed the number of cores; HIR_MPIRUN\n"
      "names another launcher). Inside an MPI job, --np must equal the job's size.\n"
      "A trace (--trace) opens in https://ui.perfetto.dev or chrome://tracing; a plugin\n"
      "(--plugin) registers its kernels in its hostir_register_kernels().\n"
      "Options take their value as `--opt value` or `--opt=value`; one that takes a value may\n"
      "be given once, --param (one per name) and --plugin many times.");
  run->add_option("PROG", raw.program, kProgHelp)->type_name("")->required();
  addSingle(run, "--iters", raw.iters, "N", "timed runs (default 1)");
  addSingle(run, "--warmup", raw.warmup, "N", "untimed runs before them (default 0)");
  addRunningOptions(run, raw, "at load", /*short_np=*/true);
  addSingle(run, "--trace", raw.trace, "FILE",
            "write a timeline of the runs, every rank's, to FILE (Chrome trace JSON)");
  addSingle(run, "--json", raw.json, "FILE",
            "write the result as JSON (format hostir-result/1) to FILE, - for standard output");

  CLI::App* sweep = app.add_subcommand(
      "sweep", "run a program at a series of sizes and print bandwidths, like nccl-tests");
  sweep->footer(
      "Sets the param named by --param-size for each size from -b to -e (times -f each step;\n"
      "sizes take K, M, G suffixes, powers of 1024) and runs the program -w + -n times at each,\n"
      "in one MPI job. By default the param counts elements of the communication that moves\n"
      "the most bytes per run (--param-unit bytes: the param is the size itself). Prints one\n"
      "row per size: size, count, type, redop, root, time (us), algbw, busbw (GB/s), #wrong.");
  sweep->add_option("PROG", raw.program, kProgHelp)->type_name("")->required();
  addSingle(sweep, "--param-size", raw.param_size, "NAME", "the param that sets the size");
  addSingle(sweep, "-b,--minbytes", raw.minbytes, "SIZE", "the first size in bytes (8, 64K, 1M)");
  addSingle(sweep, "-e,--maxbytes", raw.maxbytes, "SIZE", "the last size (default: -b)");
  addSingle(sweep, "-f,--stepfactor", raw.stepfactor, "N", "size factor between steps (default 2)");
  addSingle(sweep, "--param-unit", raw.param_unit, "U",
            "elements (default: of the largest communication) or bytes");
  addSingle(sweep, "-n,--iters", raw.iters, "N", "timed runs per size (default 20)");
  addSingle(sweep, "-w,--warmup", raw.warmup, "N", "untimed runs before them (default 5)");
  addRunningOptions(sweep, raw, "at each size", /*short_np=*/false);
  addSingle(sweep, "--json", raw.json, "FILE",
            "write the rows as JSON (format hostir-sweep/1) to FILE, - for standard output");
  addSingle(sweep, "--csv", raw.csv, "FILE", "write the rows as CSV to FILE, - for standard output");

  CLI::App* check = app.add_subcommand(
      "check", "validate and cross-rank check a program for a world size; no run");
  check->footer(
      "Checks for world size N: matched sends and receives, agreeing collectives, references\n"
      "inside their allocations, no buffer touched while a communication on it is pending.\n"
      "Exit 0 if the program is valid, 2 with the problems otherwise.");
  check->add_option("PROG", raw.program, kProgHelp)->type_name("")->required();
  addSingle(check, "--world", raw.world, "N", "the world size to check for")->required();
  addSingle(check, "--device", raw.device, "D",
            "device kind to bind backends for: host (default) or cuda");
  addRepeated(check, "--param", raw.params, "K=V", "override a program param (repeatable)");
  addRepeated(check, "--plugin", raw.plugins, "LIB",
              "load a shared library of kernels first (repeatable)");

  CLI::App* print = app.add_subcommand("print", "print a program as a listing with node paths");
  print->footer(
      "Prints PROG as a listing, one node per line, each with its node path (the JSON pointer\n"
      "that error messages use).");
  print->add_option("PROG", raw.program, kProgHelp)->type_name("")->required();
  addRepeated(print, "--param", raw.params, "K=V", "override a program param (repeatable)");

  // `hir help [COMMAND]` as well as `hir [COMMAND] --help`.
  if (argc >= 2 && std::string_view(argv[1]) == "help") {
    if (argc == 2) {
      std::cout << app.help();
      return kExitOk;
    }
    for (CLI::App* cmd : {run, sweep, check, print})
      if (cmd->get_name() == argv[2]) {
        std::cout << cmd->help("hir");
        return kExitOk;
      }
    throw UsageError(
        fmt::format("unknown command '{}'; expected run, sweep, check or print", argv[2]));
  }

  CLI::App* cmd = nullptr;
  try {
    app.parse(argc, argv);
    cmd = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
    checkLeftovers(app, cmd);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::RequiredError& e) {
    // The program or --world missing: say which, for which command.
    cmd = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
    if (cmd) {
      a.command = cmd->get_name();
      a.program = raw.program;
      const CLI::Option* world = cmd->get_option_no_throw("--world");
      if (world && world->count() > 0) a.world = 1;  // present: its value is checked later
      checkRequired(a);
    }
    throw UsageError(e.what());
  } catch (const CLI::ArgumentMismatch& e) {
    // "--np: 1 required N missing": the flag without its value.
    const std::string what = e.what();
    const std::size_t colon = what.find(':');
    if (what.rfind("--", 0) == 0 && colon != std::string::npos &&
        what.find("missing") != std::string::npos)
      throw UsageError(fmt::format("{} needs a value", what.substr(0, colon)));
    throw UsageError(what);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  a.command = cmd->get_name();
  a.program = raw.program;
  auto given = [&](const char* flag) {
    const CLI::Option* opt = cmd->get_option_no_throw(flag);
    return opt != nullptr && opt->count() > 0;
  };
  const bool launches = a.command == "run" || a.command == "sweep";
  auto forward = [&](const char* flag, const std::string& value) {
    if (given(flag) && launches) a.forwarded.push_back(fmt::format("{}={}", flag, value));
  };
  if (given("--np")) a.np = parseCount("--np", raw.np, 1);
  if (given("--world")) a.world = parseCount("--world", raw.world, 1);
  if (given("--device")) {
    a.device = raw.device;
    if (a.device != "auto" && a.device != "cuda" && a.device != "host")
      throw UsageError(fmt::format("--device expects auto, cuda or host, got '{}'", a.device));
    forward("--device", raw.device);
  }
  std::set<std::string> param_names;
  for (const std::string& kv : raw.params) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError(fmt::format("--param expects NAME=VALUE, got '{}'", kv));
    std::string name = kv.substr(0, eq);
    if (!param_names.insert(name).second)
      throw UsageError(fmt::format("--param {} given twice", name));
    a.params.emplace_back(name, parseInteger("--param " + name, kv.substr(eq + 1), INT64_MIN));
    if (launches) a.forwarded.push_back("--param=" + kv);
  }
  if (a.command == "sweep") {
    a.iters = 20;
    a.warmup = 5;
  }
  if (given("--iters")) a.iters = parseCount("--iters", raw.iters, 1);
  forward("--iters", raw.iters);
  if (given("--warmup")) a.warmup = parseCount("--warmup", raw.warmup, 0);
  forward("--warmup", raw.warmup);
  if (given("--timeout")) a.timeout_ms = parseSecondsAsMs("--timeout", raw.timeout);
  forward("--timeout", raw.timeout);
  if (raw.no_schedule_check) {
    a.schedule_check = false;
    a.forwarded.push_back("--no-schedule-check");
  }
  if (given("--trace")) {
    a.trace = raw.trace;
    checkTraceTarget(a.trace);
  }
  forward("--trace", raw.trace);
  a.plugins = raw.plugins;
  if (given("--mpirun-args")) a.mpirun_args = splitShellWords(raw.mpirun_args, "--mpirun-args");
  if (given("--hostfile")) checkHostfile(a.hostfile = raw.hostfile);
  for (const std::string& lib : raw.plugins)
    if (launches) a.forwarded.push_back("--plugin=" + lib);
  if (given("--json")) {
    a.json = raw.json;
    checkWritable("--json", a.json);
  }
  forward("--json", raw.json);
  if (given("--symmetric-memory")) {
    static constexpr std::pair<EvaluatorOptions::Symmetric, std::string_view> kModes[] = {
        {EvaluatorOptions::Symmetric::Auto, "auto"},
        {EvaluatorOptions::Symmetric::On, "on"},
        {EvaluatorOptions::Symmetric::Off, "off"}};
    a.symmetric = parseEnum(kModes, raw.symmetric, "--symmetric-memory", "symmetric memory mode");
  }
  forward("--symmetric-memory", raw.symmetric);
  if (raw.graph) {
    if (!a.schedule_check)
      throw UsageError("--graph needs the cross-rank check, which proves every rank captures "
                       "the same communications: drop --no-schedule-check");
    if (!a.trace.empty())
      throw UsageError("--graph and --trace cannot be combined: a replayed graph has no per-node "
                       "host work to trace");
    a.graph = true;
    a.warmup = std::max(a.warmup, 2);  // run 1 eager, run 2 captured
    a.forwarded.push_back("--graph");
  }
  if (raw.no_progress) {
    a.progress = false;
    a.forwarded.push_back("--no-progress");
  }
  if (a.command == "sweep") parseSweepArgs(raw, a, given, forward);
  checkRequired(a);
  return -1;
}

Program loadWithParams(const Args& a, const std::optional<std::string>& text = std::nullopt) {
  return loadProgramWithParams(a.program, a.plugins, a.params, text);
}

// The device kind backends are bound for, without creating a device. A kind
// asked for by name must be usable here: the launcher says so before any
// rank starts (exit 2), instead of every rank failing after the launch.
std::string deviceKindFor(const std::string& requested) {
  for (const DeviceInfo& d : registeredDevices()) {
    if (requested == "auto") {
      if (d.name == "cuda" && d.available(nullptr)) return "cuda";
      continue;
    }
    if (d.name != requested) continue;
    std::string why;
    if (!d.available(&why))
      throw UsageError(fmt::format("--device {}: {}", requested, why));
    return requested;
  }
  if (requested == "auto") return "host";
  std::string known;
  for (const DeviceInfo& d : registeredDevices()) known += (known.empty() ? "" : ", ") + d.name;
  throw UsageError(fmt::format("--device {}: not available: this build of hostir has no {} "
                               "device (it was configured without CUDA); it has: {}",
                               requested, requested, known));
}

// How `hir` compiles for the ranks it starts, before they start: they are
// processes (under mpirun or torchrun), on nodes not known yet.
CompileOptions launchCompileOptions(int world, const std::string& device, bool check_schedule) {
  return compileOptionsFor(world, device, RankSpace::Processes, check_schedule);
}

// Everything that can be decided before running: the same on every rank.
// Without the cross-rank check, still validation and lowering (a world below
// the program's min_world_size, a backend that cannot run on the device).
CompiledProgram checkProgram(const Program& p, int world, const std::string& device,
                             bool check_schedule = true) {
  CompiledProgram out = compile(p, launchCompileOptions(world, device, check_schedule));
  for (const ValidationError::Issue& n : out.notes)
    std::cerr << fmt::format("hir: note: {}: {}\n", n.path, n.message);
  return out;
}

// Writes `text` to standard error in one write: the ranks of a job share
// the launcher's standard error, and a line written in pieces (std::cerr is
// unbuffered, one write per <<) could be cut by another rank's.
void writeError(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void printError(const std::exception& e, const std::string& prefix = "") {
  std::string text = e.what();
  std::string out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty()) out += "hir: " + prefix + "error: " + line + "\n";
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  writeError(out);
}

// ------------------------------------------------------------------ launch

// Every local rank of the cuda device needs a GPU of its own: refused here,
// before any rank starts (exit 2).
void checkGpusForLaunch(const std::string& kind, int np) {
  if (kind != "cuda") return;
  const int gpus = visibleGpuCount();
  if (gpus > 0 && gpuSharingAllowed()) return;
  const std::string problem =
      localRanksProblem(np, gpus, fmt::format("--np {} starts {} ranks on this "
                                                           "machine", np, np),
                        std::getenv("CUDA_VISIBLE_DEVICES"));
  if (!problem.empty()) throw UsageError(problem);
}

// Starts N ranks of this same command (transport/launch.h); `program` is the
// path the ranks load.
int launchRanks(const Args& a, const std::string& program) {
  std::vector<std::string> args = {a.command};
  args.insert(args.end(), a.forwarded.begin(), a.forwarded.end());
  args.push_back("--");  // a program path that starts with '-' stays a path
  args.push_back(program);
  return launchRanksOfThisCommand(LaunchOptions{*a.np, a.mpirun_args, a.hostfile}, args);
}

// -------------------------------------------------------------- commands
int cmdPrint(const Args& a) {
  std::cout << printProgram(loadWithParams(a));
  return kExitOk;
}

int cmdCheck(const Args& a) {
  Program p = loadWithParams(a);
  std::string device = a.device == "auto" ? "host" : a.device;
  CompiledProgram r = checkProgram(p, *a.world, device);
  std::cout << fmt::format("hir: ok: '{}' is valid for world size {} ({} communications{})\n",
                           p.name, *a.world, r.communications,
                           r.truncated ? fmt::format("; checked only in part: the first {} steps "
                                                     "of each rank, the check's bound",
                                                     r.steps_per_rank)
                                       : std::string());
  // What the protocols of messages through peer-mapped memory came to
  // (auto decides by size, by the backend's BackendCaps::resolve_protocol).
  std::map<std::pair<int, Protocol>, int64_t> protocols;
  for (const auto& [pair, messages] : r.trace.pairs)
    for (const P2pMessage& m : messages)
      if (m.backend >= 0 && r.plan.backends[m.backend].maps_peer_memory)
        ++protocols[{m.backend, m.protocol}];
  if (!protocols.empty()) {
    std::string list;
    int last = -1;
    for (const auto& [key, count] : protocols) {
      const auto [backend, protocol] = key;
      list += fmt::format("{}{}{} {}", list.empty() ? "" : (backend == last ? ", " : "; "),
                          backend == last ? "" : r.plan.backends[backend].name + ": ", count,
                          toString(protocol));
      last = backend;
    }
    std::cout << fmt::format("hir: messages through peer-mapped memory{}: {}\n",
                             r.truncated ? " in the part checked" : " per run over all ranks",
                             list);
  }
  // The memory of each backend's eager slots on each rank
  // (BackendCaps::eager_slots), sized for the program's largest eager send
  // (or for the backend's limit, when the check saw a prefix only).
  for (std::size_t b = 0; b < r.plan.backends.size(); ++b) {
    const BackendInfo* info = findBackend(r.plan.backends[b].name);
    if (info == nullptr || info->caps.eager_slots == nullptr) continue;
    const EagerSlots slots =
        info->caps.eager_slots(largestEagerSend(r.trace, static_cast<int>(b)));
    if (slots.count == 0) continue;
    std::cout << fmt::format(
        "hir: {}'s eager slots: {} of {} per sender, {} per rank at world {}{}\n", info->caps.name,
        slots.count, formatBytes(static_cast<int64_t>(slots.bytes)),
        formatBytes(static_cast<int64_t>(slots.bytes * slots.count) * *a.world), *a.world,
        r.truncated ? " (sized for the largest eager send it allows: the check saw part of a run)"
                    : "");
  }
  // Graph capture (cuda only) needs what this check proves: say whether it holds.
  if (device != "cuda") return kExitOk;
  if (r.capture_blocker)
    std::cout << fmt::format("hir: graph capture (--graph): not possible: {}: {}\n",
                             r.capture_blocker->path, r.capture_blocker->message);
  else if (r.truncated)
    std::cout << "hir: graph capture (--graph): not proven: the check covered only part of a "
                 "run\n";
  else
    std::cout << fmt::format(
        "hir: graph capture (--graph): possible: every rank captures the same communications "
        "in the same order ({} per run over all ranks, compared across ranks by this check)\n",
        r.communications);
  return kExitOk;
}

int runOnRank(const Args& a, Bootstrap* boot);

int cmdRun(const Args& a) {
  const bool launcher = a.np && !launchedByMpi() && !launchedByTorchrun();
  if (!launcher && (!a.mpirun_args.empty() || !a.hostfile.empty()))
    throw UsageError(fmt::format("{} is for the launcher: it needs --np N outside an MPI job or "
                                 "torchrun", a.hostfile.empty() ? "--mpirun-args" : "--hostfile"));
  if (launcher) {
    // Decide what every rank would decide, once, before starting them.
    std::optional<std::string> text;
    if (a.program == "-") text = readStandardInput();
    Program p = loadWithParams(a, text);
    const std::string kind = deviceKindFor(a.device);
    checkGpusForLaunch(kind, *a.np);
    if (a.command == "sweep")
      planSweep(p, a.sweep, launchCompileOptions(*a.np, kind, a.schedule_check));  // every size
    else if (CompiledProgram c = checkProgram(p, *a.np, kind, a.schedule_check); a.graph)
      requireCapturable(c);
    // The progress line (rank 0) is updated in place when this is a terminal.
    setenv("HIR_STDERR_TTY", isatty(STDERR_FILENO) ? "1" : "0", 1);
    if (!text) return launchRanks(a, a.program);
    TempProgramFile file(*text);
    return launchRanks(a, file.path());
  }
  // A rank: tells the launcher (when there is one) how it ends.
  endWithParent();
  std::unique_ptr<Bootstrap> boot =
      createBootstrapFromEnvironment(std::chrono::milliseconds(a.timeout_ms));
  startRankReport(boot->rank());
  int code = kExitInternal;
  try {
    code = runOnRank(a, boot.get());
  } catch (const Error& e) {
    reportRankExit(e.exitCode());
    throw;
  } catch (...) {
    reportRankExit(kExitInternal);
    throw;
  }
  reportRankExit(code);
  return code;
}

// Under torchrun (the TCP bootstrap) the host device has no backend that
// crosses processes: only MPI does, and MPI is not started. A program with a
// communication between ranks is refused at load, the same on every rank.
void refuseHostCommsWithoutMpi(const Program& p, int world, const std::string& device) {
  if (!launchedByTorchrun() || world == 1 || deviceKindFor(device) != "host") return;
  const Plan plan = checkProgram(p, world, "host", /*check_schedule=*/false).plan;
  for (const PlanComm& c : plan.comms) {
    const bool cross = c.type == CommType::Send || c.type == CommType::Recv ||
                       plan.teams[c.team].ranks.size() > 1;
    if (cross)
      throw UsageError(fmt::format(
          "{}: '{}' ({}) communicates between ranks, and on the host device only MPI carries "
          "communications between processes; under torchrun there is none: start the ranks "
          "with mpirun (hir run --np N) or use --device cuda",
          plan.nodes[c.node].path, c.name, toString(c.type)));
  }
}

// Each rank of the cuda device needs a GPU of its own, on every node of the
// job: every rank learns each node's ranks and GPUs (one allgather at load,
// so that all ranks decide alike) and all refuse (exit 2, said by rank 0)
// when a node has too few. A node without GPUs is left to the device's own
// message.
void checkGpusPerNode(Bootstrap& boot, const std::string& device) {
  if (device == "host") return;
  const bool sharing = gpuSharingAllowed();
  int32_t mine[2] = {boot.localSize(), visibleGpuCount()};
  std::vector<int32_t> all(2 * static_cast<std::size_t>(boot.world()));
  boot.allgather(mine, all.data(), sizeof mine);
  const std::vector<std::string>& nodes = boot.nodes();
  for (int r = 0; r < boot.world(); ++r) {
    const int local = all[2 * r], gpus = all[2 * r + 1];
    if (gpus == 0 || sharing || (device != "cuda" && device != "auto")) continue;
    const std::string problem = localRanksProblem(
        local, gpus, fmt::format("the MPI job runs {} ranks on {}", local, nodes[r]), nullptr);
    if (!problem.empty()) throw UsageError(problem);
  }
}

// The run on one rank of the job; returns its exit code, or ends the job
// (Bootstrap::abort) when the failure may be this rank's alone.
int runOnRank(const Args& a, Bootstrap* boot) {
  int rank = boot->rank(), world = boot->world();
  bool loading = true;
  try {
    if (a.np && *a.np != world)
      throw UsageError(fmt::format("--np {} but the MPI job has {} ranks", *a.np, world));
    std::optional<std::string> text;
    if (a.program == "-") text = programTextOnEveryRank(*boot);
    Program p = loadWithParams(a, text);
    refuseHostCommsWithoutMpi(p, world, a.device);
    checkGpusPerNode(*boot, a.device);
    SessionOptions so;
    so.device = a.device;
    Session session(*boot, so);
    EvaluatorOptions eo;
    eo.timeout = std::chrono::milliseconds(a.timeout_ms);
    // Graph mode keeps the check on every rank: it is the proof of capture.
    eo.check_schedule = a.graph || (a.schedule_check && !std::getenv("HIR_LAUNCHED_NP"));
    eo.trace = !a.trace.empty();
    eo.graph = a.graph;
    eo.symmetric_memory = a.symmetric;
    if (a.command == "sweep") {
      SweepPlan plan =
          planSweep(p, a.sweep, compileOptionsFor(*boot, session.device().kind(), eo.check_schedule));
      eo.check_schedule = a.graph;  // planSweep checked every size
      loading = false;
      return runSweep(session, *boot, plan, a.sweep, eo);
    }
    Evaluator ev(session, p, eo);
    loading = false;

    double seconds_per_run = 0;
    {
      Progress progress(rank == 0 && a.progress);
      progress.stage("", a.warmup, a.warmup + a.iters);
      seconds_per_run = timeRuns(ev, *boot, a.warmup, a.iters, progress);
    }
    if (!a.trace.empty()) {
      // Collective: every rank gets the same error, and rank 0 says it.
      std::string events = ev.traceEvents();
      try {
        writeTrace(*boot, events, a.trace);
      } catch (const Error& e) {
        if (rank == 0) printError(e);
        return e.exitCode();
      }
    }

    RunReport report = ev.report();
    std::cerr << report.format();
    const RunFigures figures = gatherFigures(*boot, seconds_per_run, report);
    const std::vector<std::string> failures =
        a.json.empty() ? std::vector<std::string>() : gatherText(*boot, failuresJson(report));
    const int code = figures.failed_ranks ? kExitCheckFailed : kExitOk;
    if (rank == 0) {
      RunDescription d;
      d.program = p.name;
      d.world = world;
      d.device = session.device().describe();
      d.device_kind = std::string(session.device().kind());
      d.iters = a.iters;
      d.warmup = a.warmup;
      for (const Param& param : p.params) d.params.emplace_back(param.name, param.value);
      d.check_nodes = ev.plan().checks.size();
      if (a.graph) d.graph = ev.graphStats();
      d.symmetric = ev.symmetricAllocations();
      const ProgramVolume volume = commVolumes(ev.plan());
      // With --json -, standard output is the document.
      std::ostream& out = a.json == "-" ? std::cerr : std::cout;
      out << resultLine(d, figures, volume);
      if (!a.trace.empty()) out << fmt::format("hir: trace written to {}\n", a.trace);
      out << std::flush;
      if (!a.json.empty())
        writeTextFile(a.json, resultJson(d, ev.plan(), figures, volume, failures, code),
                      "result");
    }
    return code;
  } catch (const Error& e) {
    // Load errors are the same on every rank: rank 0 reports them and all
    // exit. Errors while running may be one rank's alone: end the job.
    if (loading && (dynamic_cast<const ParseError*>(&e) || dynamic_cast<const ValidationError*>(&e) ||
                    dynamic_cast<const UsageError*>(&e))) {
      if (rank == 0) printError(e);
      return e.exitCode();
    }
    printError(e, world > 1 ? fmt::format("rank {}: ", rank) : "");
    std::cerr.flush();
    if (world > 1) {
      reportRankExit(e.exitCode());
      boot->abort(e.exitCode());
    }
    return e.exitCode();
  }
}

}  // namespace
}  // namespace hir

int main(int argc, char** argv) {
  using namespace hir;
  try {
    Args a;
    if (int done = parseArgs(argc, argv, a); done >= 0) return done;
    if (a.command == "print") return cmdPrint(a);
    if (a.command == "check") return cmdCheck(a);
    // run and sweep
    return cmdRun(a);
  } catch (const UsageError& e) {
    printError(e);
    std::cerr << "hir: see `hir --help`\n";
    return kExitBadInput;
  } catch (const Error& e) {
    printError(e);
    return e.exitCode();
  } catch (const InternalError& e) {
    writeError(fmt::format("hir: {}\n", e.what()));
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    // This machine's memory ran out (a check at a large --world, a huge
    // program): a runtime failure, not a bug of hir.
    writeError(fmt::format("hir: error: out of host memory in '{}': the program, its world size "
                           "and the cross-rank check need more than this machine gives (a smaller "
                           "--world, or --no-schedule-check, needs less)\n",
                           argc > 1 ? argv[1] : "hir"));
    return kExitRuntimeFailure;
  } catch (const std::exception& e) {
    writeError(fmt::format("hir: internal error: {}\n", e.what()));
    return kExitInternal;
  }
}
