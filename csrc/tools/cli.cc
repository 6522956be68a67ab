#include "tools/cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string_view>

#include <hostir/backend.h>
#include <hostir/version.h>

#include "common/parse_int.h"
#include "tools/files.h"
#include "tools/run_output.h"
#include "transport/launch.h"

namespace hir {
namespace {

// ------------------------------------------------------------ the values

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

void applyDevice(Args& a, const std::string& flag, const std::string& v) {
  if (v != "auto" && v != "cuda" && v != "host")
    throw UsageError(fmt::format("{} expects auto, cuda or host, got '{}'", flag, v));
  a.device = v;
}

// NAME=VALUE, one per name.
void applyParam(Args& a, const std::string& flag, const std::string& kv) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError(fmt::format("{} expects NAME=VALUE, got '{}'", flag, kv));
  const std::string name = kv.substr(0, eq);
  for (const auto& [given, value] : a.params)
    if (given == name) throw UsageError(fmt::format("{} {} given twice", flag, name));
  a.params.emplace_back(name, parseInteger(flag + " " + name, kv.substr(eq + 1), INT64_MIN));
}

void applyIters(Args& a, const std::string& flag, const std::string& v) {
  a.iters = parseCount(flag, v, 1);
}
void applyWarmup(Args& a, const std::string& flag, const std::string& v) {
  a.warmup = parseCount(flag, v, 0);
}
void applyNp(Args& a, const std::string& flag, const std::string& v) {
  a.np = parseCount(flag, v, 1);
}
void applyJson(Args& a, const std::string& flag, const std::string& v) {
  checkOutputFile(flag, v, true);
  a.json = v;
}

// ------------------------------------------------------------- the table

constexpr unsigned kRunning = kRun | kSweep;  // the commands that start ranks
constexpr unsigned kAll = kRun | kSweep | kCheck | kPrint;
constexpr const char* kNpHelp = "number of ranks (default: the MPI job's size, or 1)";

constexpr Flag kFlags[] = {
    {.names = "--param-size", .commands = kSweep, .type = "NAME", .required = true,
     .help = "the param that sets the size",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       if (v.empty()) throw UsageError(fmt::format("{} expects a param name", flag));
       a.sweep.param = v;
     }},
    {.names = "-b,--minbytes", .commands = kSweep, .type = "SIZE", .required = true,
     .help = "the first size in bytes: 8, 64K, 1M",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       a.sweep.min_bytes = parseSize(flag, v);
     }},
    {.names = "-e,--maxbytes", .commands = kSweep, .type = "SIZE",
     .help = "the last size (default: -b)",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       a.sweep.max_bytes = parseSize(flag, v);
     }},
    {.names = "-f,--stepfactor", .commands = kSweep, .type = "N", .fallback = "2",
     .help = "size factor between steps",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       a.sweep.factor = parseInteger(flag, v, 2);
     }},
    {.names = "--param-unit", .commands = kSweep, .type = "U", .fallback = "elements",
     .help = "elements (of the communication that moves the most) or bytes",
     .apply = [](Args& a, const std::string&, const std::string& v) {
       a.sweep.unit = parseParamUnit(v);
     }},
    {.names = "--iters", .commands = kRun, .type = "N", .fallback = "1", .help = "timed runs",
     .apply = applyIters},
    {.names = "-n,--iters", .commands = kSweep, .type = "N", .fallback = "20",
     .help = "timed runs per size", .apply = applyIters},
    {.names = "--warmup", .commands = kRun, .type = "N", .fallback = "0",
     .help = "untimed runs before them", .apply = applyWarmup},
    {.names = "-w,--warmup", .commands = kSweep, .type = "N", .fallback = "5",
     .help = "untimed runs before them, per size", .apply = applyWarmup},
    {.names = "--world", .commands = kCheck, .type = "N", .required = true, .to_ranks = false,
     .help = "the world size to check for",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       a.world = parseCount(flag, v, 1);
     }},
    // `run` takes mpirun's -n for --np; `sweep` keeps -n for nccl-tests'
    // iterations.
    {.names = "-n,--np", .commands = kRun, .type = "N", .to_ranks = false, .help = kNpHelp,
     .apply = applyNp},
    {.names = "--np", .commands = kSweep, .type = "N", .to_ranks = false, .help = kNpHelp,
     .apply = applyNp},
    {.names = "--device", .commands = kRunning, .type = "D", .fallback = "auto",
     .help = "auto (cuda if a GPU is present, else host), cuda or host", .apply = applyDevice},
    {.names = "--device", .commands = kCheck, .type = "D", .fallback = "host", .to_ranks = false,
     .help = "the device kind to bind backends for: host or cuda", .apply = applyDevice},
    {.names = "--param", .commands = kAll, .arity = Arity::kMany, .type = "K=V",
     .help = "override a program param (repeatable)", .apply = applyParam},
    {.names = "--timeout", .commands = kRunning, .type = "S", .fallback = "300",
     .help = "seconds any host wait may take, fractions too: 0.5",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       a.timeout_ms = parseSecondsAsMs(flag, v);
     }},
    {.names = "--no-schedule-check", .commands = kRunning, .arity = Arity::kSwitch,
     .help = "skip the cross-rank check (for very long loops)",
     .apply = [](Args& a, const std::string&, const std::string&) { a.schedule_check = false; }},
    {.names = "--plugin", .commands = kRunning | kCheck, .arity = Arity::kMany, .type = "LIB",
     .help = "load a shared library of kernels first (repeatable)",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       checkRegularInput(flag, v);
       a.plugins.push_back(v);
     }},
    {.names = "--mpirun-args", .commands = kRunning, .type = "ARGS", .to_ranks = false,
     .help = "more arguments for mpirun under --np (split into words as a shell does)",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       a.mpirun_args = splitShellWords(v, flag);
     }},
    {.names = "--hostfile", .commands = kRunning, .type = "FILE", .to_ranks = false,
     .help = "mpirun's hostfile under --np: start the ranks on the nodes it lists",
     .apply = [](Args& a, const std::string&, const std::string& v) {
       checkHostfile(v);
       a.hostfile = v;
     }},
    {.names = "--no-progress", .commands = kRunning, .arity = Arity::kSwitch,
     .help = "no progress line on standard error (shown for runs longer than 3 s)",
     .apply = [](Args& a, const std::string&, const std::string&) { a.progress = false; }},
    {.names = "--symmetric-memory", .commands = kRunning, .type = "MODE", .fallback = "auto",
     .help = "auto (on with --graph), on or off: collectives' buffers in the symmetric memory "
             "of a backend that has it: {symmetric}",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       static constexpr std::pair<EvaluatorOptions::Symmetric, std::string_view> kModes[] = {
           {EvaluatorOptions::Symmetric::Auto, "auto"},
           {EvaluatorOptions::Symmetric::On, "on"},
           {EvaluatorOptions::Symmetric::Off, "off"}};
       a.symmetric = parseEnum(kModes, v, flag, "symmetric memory mode");
     }},
    {.names = "--graph", .commands = kRunning, .arity = Arity::kSwitch,
     .help = "capture run 2 into a CUDA graph and replay it on later runs (cuda; a backend "
             "that can be captured: {capturable}; at least 2 warm-up runs)",
     .apply = [](Args& a, const std::string&, const std::string&) { a.graph = true; }},
    {.names = "--trace", .commands = kRun, .type = "FILE",
     .help = "write a timeline of the runs, every rank's, to FILE (Chrome trace JSON)",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       checkOutputFile(flag, v, false);
       a.trace = v;
     }},
    {.names = "--json", .commands = kRun, .type = "FILE",
     .help = "write the result as JSON (format hostir-result/1) to FILE, - for standard output",
     .apply = applyJson},
    {.names = "--json", .commands = kSweep, .type = "FILE",
     .help = "write the rows as JSON (format hostir-sweep/1) to FILE, - for standard output",
     .apply = applyJson},
    {.names = "--csv", .commands = kSweep, .type = "FILE",
     .help = "write the rows as CSV to FILE, - for standard output",
     .apply = [](Args& a, const std::string& flag, const std::string& v) {
       checkOutputFile(flag, v, true);
       a.sweep.csv = v;
     }},
};

// What no single flag can check: flags that exclude or change each other,
// and outputs that would replace an input or each other.
void finishArgs(Args& a) {
  std::vector<NamedFile> inputs{{"PROG", a.program}, {"--hostfile", a.hostfile}};
  for (const std::string& p : a.plugins) inputs.push_back({"--plugin", p});
  std::vector<NamedFile> outputs;
  if (!a.trace.empty()) outputs.push_back({"--trace", a.trace});
  if (!a.json.empty()) outputs.push_back({"--json", a.json});
  if (!a.sweep.csv.empty()) outputs.push_back({"--csv", a.sweep.csv});
  checkOutputsApart(inputs, outputs);
  if (a.graph) {
    if (!a.schedule_check)
      throw UsageError("--graph needs the cross-rank check, which proves every rank captures "
                       "the same communications: drop --no-schedule-check");
    if (!a.trace.empty())
      throw UsageError("--graph and --trace cannot be combined: a replayed graph has no per-node "
                       "host work to trace");
    a.warmup = std::max(a.warmup, 2);  // run 1 eager, run 2 captured
  }
  if (a.command != "sweep") return;
  SweepOptions& o = a.sweep;
  for (const auto& [name, value] : a.params)
    if (name == o.param)
      throw UsageError(fmt::format("--param {} and --param-size {}: the sweep sets {} itself",
                                   name, name, name));
  if (o.max_bytes == 0) o.max_bytes = o.min_bytes;  // -e not given
  if (o.csv == "-" && a.json == "-")
    throw UsageError("--json - and --csv -: only one of them can go to standard output");
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.json = a.json;
  o.progress = a.progress;
  o.graph = a.graph;
}

// ---------------------------------------------------------- the commands

constexpr const char* kDescription =
    "Runs hostir programs (JSON, format hostir/1) on GPUs or on the host.\n";

constexpr const char* kMainFooter =
    R"(`hir <command> --help` describes each command (docs/cli.md: all of them).
exit codes: 0 ok, 1 a check failed, 2 bad usage or bad program,
            3 runtime failure (timeout, device or library error), 4 internal error)";

constexpr const char* kProgHelp = "the program: a JSON file, or - for standard input";

struct CommandText {
  const char* name;
  const char* description;
  const char* footer;
};

// In the order of Command's bits.
constexpr CommandText kCommands[] = {
    {"run", "run a program on every rank and verify its checks",
     "With --np N outside an MPI job, hir checks PROG once for world size N, then starts N\n"
     "local ranks of itself through mpirun (N may exceed the number of cores; HIR_MPIRUN\n"
     "names another launcher). Inside an MPI job, --np must equal the job's size.\n"
     "A trace (--trace) opens in https://ui.perfetto.dev or chrome://tracing; a plugin\n"
     "(--plugin) registers its kernels in its hostir_register_kernels().\n"
     "Options take their value as `--opt value` or `--opt=value`; one that takes a value may\n"
     "be given once, --param (one per name) and --plugin many times."},
    {"sweep", "run a program at a series of sizes and print bandwidths, like nccl-tests",
     "Sets the param named by --param-size for each size from -b to -e (times -f each step;\n"
     "sizes take K, M, G suffixes, powers of 1024) and runs the program -w + -n times at each,\n"
     "in one MPI job. By default the param counts elements of the communication that moves\n"
     "the most bytes per run (--param-unit bytes: the param is the size itself). Prints one\n"
     "row per size: size, count, type, redop, root, time (us), algbw, busbw (GB/s), #wrong."},
    {"check", "validate and cross-rank check a program for a world size; no run",
     "Checks for world size N: matched sends and receives, agreeing collectives, references\n"
     "inside their allocations, no buffer touched while a communication on it is pending.\n"
     "Exit 0 if the program is valid, 2 with the problems otherwise."},
    {"print", "print a program as a listing with node paths",
     "Prints PROG as a listing, one node per line, each with its node path (the JSON pointer\n"
     "that error messages use)."},
};
static_assert(std::size(kCommands) == 4, "one text per Command bit");

constexpr const char* kCommandNames[] = {kCommands[0].name, kCommands[1].name,
                                         kCommands[2].name, kCommands[3].name};

std::string expectedCommands() {
  return fmt::format("expected {}, {}, {} or {}", kCommandNames[0], kCommandNames[1],
                     kCommandNames[2], kCommandNames[3]);
}

// A flag of one command as CLI11 parses it: the text of each value, kept
// for the flag's own `apply`. (CLI11's integer conversion differs between
// versions: 2.1 clamps an overflowing 64-bit value silently and reads
// "010" as octal, 2.4 also takes "1_000"; so every value stays text.)
struct Bound {
  const Flag* flag = nullptr;
  CLI::Option* option = nullptr;
  std::string one;
  std::vector<std::string> many;
  bool on = false;
};

// One command: its CLI11 subcommand with PROG and a Bound per flag.
struct CommandLine {
  CLI::App* app = nullptr;
  unsigned bit = 0;
  std::string program;
  std::vector<std::unique_ptr<Bound>> flags;  // in the table's order
};

void addFlags(CommandLine& c) {
  for (const Flag& flag : kFlags) {
    if ((flag.commands & c.bit) == 0) continue;
    auto b = std::make_unique<Bound>();
    b->flag = &flag;
    const std::string help = flagHelp(flag);
    switch (flag.arity) {
      case Arity::kSwitch:  // CLI11 makes it TakeLast: twice is reported below
        b->option = c.app->add_flag(flag.names, b->on, help);
        break;
      case Arity::kOne:  // TakeLast only keeps CLI11 from failing first with its own message
        b->option = c.app->add_option(flag.names, b->one, help)
                        ->type_name(flag.type)
                        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        break;
      case Arity::kMany:  // one value per occurrence: `--param a=1 prog.json` leaves PROG
        b->option = c.app->add_option(flag.names, b->many, help)
                        ->type_name(flag.type)
                        ->allow_extra_args(false);
        break;
    }
    if (flag.required) b->option->required();
    c.flags.push_back(std::move(b));
  }
}

bool given(const Bound& b) {
  return b.flag->arity == Arity::kSwitch ? b.on : b.option->count() > 0;
}

// A missing program or required flag, said for the command.
void checkRequired(const CommandLine& c) {
  const std::string name = c.app->get_name();
  if (c.program.empty())
    throw UsageError(fmt::format("`hir {}` needs a program file (or - for standard input)", name));
  for (const auto& b : c.flags) {
    if (!b->flag->required || given(*b)) continue;
    std::string names = b->flag->names;
    std::replace(names.begin(), names.end(), ',', '/');
    throw UsageError(
        fmt::format("`hir {}` needs {} {} ({})", name, names, b->flag->type, b->flag->help));
  }
}

// What CLI11 leaves to us, with messages that name the flag: what was left
// over (an unknown command or option, a second program) and an option
// given twice.
void checkLeftovers(CLI::App& app, const CommandLine* c) {
  for (const std::string& extra : app.remaining()) {
    if (extra.size() > 1 && extra[0] == '-')
      throw UsageError(fmt::format("unknown option '{}'; see `hir --help`", extra));
    throw UsageError(fmt::format("unknown command '{}'; {}", extra, expectedCommands()));
  }
  if (!c) throw UsageError("missing command; try `hir --help`");
  const std::string name = c->app->get_name();
  for (const std::string& extra : c->app->remaining()) {
    if (extra == "--") continue;  // the end of the options, before PROG
    if (extra.size() > 1 && extra[0] == '-')
      throw UsageError(fmt::format("unknown option '{}' for `hir {}`; see `hir {} --help`", extra,
                                   name, name));
    throw UsageError(fmt::format("unexpected argument '{}': one program at a time", extra));
  }
  for (const auto& b : c->flags)
    if (b->flag->arity != Arity::kMany && b->option->count() > 1)
      throw UsageError(fmt::format("{} given twice", flagName(*b->flag)));
}

// Every flag of the command, given or by its fallback, into `a`, and what
// the ranks receive.
void applyFlags(const CommandLine& c, Args& a) {
  a.command = c.app->get_name();
  a.program = c.program;
  const bool launches = (c.bit & kRunning) != 0;
  for (const auto& b : c.flags) {
    const Flag& flag = *b->flag;
    const std::string name = flagName(flag);
    const bool forward = launches && flag.to_ranks;
    if (!given(*b)) {
      if (flag.fallback) flag.apply(a, name, flag.fallback);
      continue;
    }
    switch (flag.arity) {
      case Arity::kSwitch:
        flag.apply(a, name, "");
        if (forward) a.forwarded.push_back(name);
        break;
      case Arity::kOne:
        flag.apply(a, name, b->one);
        if (forward) a.forwarded.push_back(name + "=" + b->one);
        break;
      case Arity::kMany:
        for (const std::string& v : b->many) {
          flag.apply(a, name, v);
          if (forward) a.forwarded.push_back(name + "=" + v);
        }
        break;
    }
  }
  finishArgs(a);
}

}  // namespace

std::span<const Flag> flagTable() { return kFlags; }

std::string flagName(const Flag& flag) {
  const std::string_view names = flag.names;
  return std::string(names.substr(names.rfind(',') + 1));
}

std::string flagHelp(const Flag& flag) {
  std::string help = flag.help;
  auto fill = [&](std::string_view key, bool BackendCaps::*has) {
    const std::size_t at = help.find(key);
    if (at == std::string::npos) return;
    std::string names;
    for (const BackendCaps& caps : backendCatalog())
      if (caps.*has) names += (names.empty() ? "" : ", ") + caps.name;
    help.replace(at, key.size(), names.empty() ? "none in this build" : names);
  };
  fill("{capturable}", &BackendCaps::capturable);
  fill("{symmetric}", &BackendCaps::symmetric_memory);
  if (flag.fallback) help += fmt::format(" (default {})", flag.fallback);
  return help;
}

std::span<const char* const> commandNames() { return kCommandNames; }

int parseArgs(int argc, char** argv, Args& a) {
  CLI::App app{kDescription, "hir"};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.set_version_flag("-V,--version", std::string("hir ") + version(),
                       "print `hir <version>` and exit");
  app.require_subcommand(0, 1);
  app.allow_extras();  // checkLeftovers reports them, naming the command
  app.footer(kMainFooter);
  app.get_formatter()->column_width(28);
  CommandLine commands[std::size(kCommands)];
  for (std::size_t i = 0; i < std::size(kCommands); ++i) {
    CommandLine& c = commands[i];
    c.bit = 1u << i;
    c.app = app.add_subcommand(kCommands[i].name, kCommands[i].description);
    c.app->footer(kCommands[i].footer);
    c.app->add_option("PROG", c.program, kProgHelp)->type_name("")->required();
    addFlags(c);
  }

  // `hir help [COMMAND]` as well as `hir [COMMAND] --help`.
  if (argc >= 2 && std::string_view(argv[1]) == "help") {
    if (argc == 2) {
      std::cout << app.help();
      return kExitOk;
    }
    for (const CommandLine& c : commands)
      if (c.app->get_name() == argv[2]) {
        std::cout << c.app->help("hir");
        return kExitOk;
      }
    throw UsageError(fmt::format("unknown command '{}'; {}", argv[2], expectedCommands()));
  }

  auto chosen = [&]() -> const CommandLine* {
    for (const CommandLine& c : commands)
      if (c.app->parsed()) return &c;
    return nullptr;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::RequiredError& e) {
    if (const CommandLine* c = chosen()) checkRequired(*c);  // which one, for which command
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
  const CommandLine* c = chosen();
  checkLeftovers(app, c);
  applyFlags(*c, a);
  return -1;
}

}  // namespace hir
