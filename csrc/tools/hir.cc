// The `hir` command: run, check and print hostir programs.
// Exit codes (docs/cli.md): 0 ok, 1 a check failed, 2 bad usage or bad
// program, 3 runtime failure (timeout, device or library error), 4 bug.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/device.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/kernel.h>
#include <hostir/printer.h>
#include <hostir/session.h>

#include "common/check.h"
#include "compile/compile.h"
#include "runtime/trace.h"

namespace hir {
namespace {

constexpr const char* kMainHelp = R"(usage: hir <command> [options]

Runs hostir programs (JSON, format hostir/1) on GPUs or on the host.

commands:
  run PROG     run a program on every rank and verify its checks
  check PROG   load, validate, lower and check a program for a world size; no run
  print PROG   print a program as a listing with node paths

`hir <command> --help` describes each command.
exit codes: 0 ok, 1 a check failed, 2 bad usage or bad program,
            3 runtime failure (timeout, device or library error), 4 internal error
)";

constexpr const char* kRunHelp = R"(usage: hir run PROG [options]

Runs PROG on every rank. With --np N outside an MPI job, starts N local ranks
through mpirun itself (N may exceed the number of cores).

options:
  --np N              number of ranks (default: the MPI job's size, or 1)
  --device D          auto (default: cuda when a GPU is present, else host), cuda, host
  --param K=V         override a program param (repeatable)
  --iters N           timed runs (default 1)
  --warmup N          untimed runs before them (default 0)
  --timeout S         seconds any host wait may take before the run fails (default 300)
  --no-schedule-check skip the cross-rank check at load (large loops)
  --trace FILE        write a timeline of the runs, every rank's, to FILE (Chrome trace
                      JSON: open it in https://ui.perfetto.dev or chrome://tracing)
  --plugin LIB        load a shared library of kernels first (its
                      hostir_register_kernels() registers them; repeatable)
)";

constexpr const char* kCheckHelp = R"(usage: hir check PROG --world N [options]

Loads PROG, validates it, lowers it and runs the cross-rank check for world
size N: matched sends and receives, agreeing collectives, references inside
their allocations, no buffer touched while a communication on it is pending.
Nothing runs. Exit 0 if the program is valid, 2 with the problems otherwise.

options:
  --world N      world size to check for (required)
  --device D     device kind to bind backends for: host (default) or cuda
  --param K=V    override a program param (repeatable)
  --plugin LIB   load a shared library of kernels first (repeatable)
)";

constexpr const char* kPrintHelp = R"(usage: hir print PROG [--param K=V]...

Prints PROG as a listing, one node per line, each with its node path (the
JSON pointer that error messages use).
)";

struct Args {
  std::string command;
  std::string program;
  std::optional<int> np;
  std::optional<int> world;
  std::string device = "auto";
  std::vector<std::pair<std::string, int64_t>> params;
  int iters = 1;
  int warmup = 0;
  int timeout_s = 300;
  bool schedule_check = true;
  std::string trace;  // --trace FILE
  std::vector<std::string> plugins;  // --plugin LIB, in order
  bool help = false;
  std::vector<std::string> forwarded;  // the arguments after the command, without --np
};

// A 64-bit integer in [min, max]: out of range is an error, never a
// truncation (a flag stored in an int gets max = INT_MAX).
int64_t parseInt(const std::string& flag, const std::string& text, int64_t min,
                 int64_t max = INT64_MAX) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0')
    throw UsageError(fmt::format("{} expects an integer, got '{}'", flag, text));
  if (errno == ERANGE || v < min || v > max)
    throw UsageError(fmt::format("{} must be in [{}, {}], got {}", flag, min, max, text));
  return v;
}

int parseCount(const std::string& flag, const std::string& text, int min) {
  return static_cast<int>(parseInt(flag, text, min, INT_MAX));
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

Args parseArgs(int argc, char** argv) {
  Args a;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) throw UsageError("missing command; try `hir --help`");
  a.command = args[0];
  if (a.command == "--help" || a.command == "-h" || a.command == "help") {
    a.help = true;
    a.command.clear();
    return a;
  }
  if (a.command != "run" && a.command != "check" && a.command != "print")
    throw UsageError(fmt::format("unknown command '{}'; expected run, check or print",
                                 a.command));
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value", arg));
      return args[++i];
    };
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--np" && a.command == "run") {
      a.np = parseCount(arg, value(), 1);
    } else if (arg == "--world" && a.command == "check") {
      a.world = parseCount(arg, value(), 1);
    } else if (arg == "--device" && a.command != "print") {
      a.device = value();
      if (a.device != "auto" && a.device != "cuda" && a.device != "host")
        throw UsageError(fmt::format("--device expects auto, cuda or host, got '{}'", a.device));
    } else if (arg == "--param") {
      std::string kv = value();
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        throw UsageError(fmt::format("--param expects NAME=VALUE, got '{}'", kv));
      a.params.emplace_back(kv.substr(0, eq),
                            parseInt("--param " + kv.substr(0, eq), kv.substr(eq + 1),
                                     INT64_MIN));
    } else if (arg == "--iters" && a.command == "run") {
      a.iters = parseCount(arg, value(), 1);
    } else if (arg == "--warmup" && a.command == "run") {
      a.warmup = parseCount(arg, value(), 0);
    } else if (arg == "--timeout" && a.command == "run") {
      a.timeout_s = parseCount(arg, value(), 1);
    } else if (arg == "--no-schedule-check" && a.command == "run") {
      a.schedule_check = false;
    } else if (arg == "--plugin" && a.command != "print") {
      a.plugins.push_back(value());
    } else if (arg == "--trace" && a.command == "run") {
      a.trace = value();
      checkTraceTarget(a.trace);
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError(fmt::format("unknown option '{}' for `hir {}`; see `hir {} --help`", arg,
                                   a.command, a.command));
    } else if (a.program.empty()) {
      a.program = arg;
    } else {
      throw UsageError(fmt::format("unexpected argument '{}': one program at a time", arg));
    }
  }
  // What each rank started by --np gets: the same arguments but --np.
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--np") {
      ++i;
      continue;
    }
    a.forwarded.push_back(args[i]);
  }
  if (a.help) return a;
  if (a.program.empty()) throw UsageError(fmt::format("`hir {}` needs a program file", a.command));
  if (a.command == "check" && !a.world)
    throw UsageError("`hir check` needs --world N (the world size to check for)");
  return a;
}

// Kernels first: validation checks kernel nodes against the registry.
Program loadWithParams(const Args& a) {
  for (const std::string& lib : a.plugins) loadKernelPlugin(lib);
  Program p = loadProgram(a.program);
  applyParamOverrides(p, a.params);
  return p;
}

// The device kind backends are bound for, without creating a device.
std::string deviceKindFor(const std::string& requested) {
  if (requested != "auto") return requested;
  for (const DeviceInfo& d : registeredDevices())
    if (d.name == "cuda" && d.available(nullptr)) return "cuda";
  return "host";
}

// Everything that can be decided before running: the same on every rank.
CompiledProgram checkProgram(const Program& p, int world, const std::string& device) {
  CompileOptions co;
  co.world = world;
  co.device = device;
  return compile(p, co);
}

void printError(const std::exception& e, const std::string& prefix = "") {
  std::string text = e.what();
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty()) std::cerr << "hir: " << prefix << "error: " << line << "\n";
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
}

// ------------------------------------------------------------------ launch
std::string selfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "hir";
  buf[n] = '\0';
  return buf;
}

// Starts N ranks of this same command through mpirun and returns its exit code.
int launchRanks(const Args& a) {
  const char* mpirun = std::getenv("HIR_MPIRUN");
  std::string launcher = mpirun ? mpirun : "mpirun";
  std::vector<std::string> cmd = {launcher, "-np", std::to_string(*a.np), "--oversubscribe",
                                  "--bind-to", "none"};
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.push_back(selfPath());
  cmd.push_back("run");
  cmd.insert(cmd.end(), a.forwarded.begin(), a.forwarded.end());
  // Shared memory between local ranks; no single-copy (ptrace) mechanism,
  // which containers often forbid.
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  setenv("HIR_LAUNCHED_NP", std::to_string(*a.np).c_str(), 1);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("fork failed: {}", std::strerror(errno)), kExitRuntimeFailure);
  if (pid == 0) {
    std::vector<char*> argv;
    for (std::string& s : cmd) argv.push_back(s.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr,
                 "hir: error: --np %d needs mpirun (OpenMPI) on PATH or in HIR_MPIRUN: %s\n",
                 *a.np, std::strerror(errno));
    _exit(kExitBadInput);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return kExitRuntimeFailure;
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
                           r.truncated ? "; long loops were checked only in part" : "");
  return kExitOk;
}

int cmdRun(const Args& a) {
  if (a.np && !launchedByMpi()) {
    // Decide what every rank would decide, once, before starting them.
    Program p = loadWithParams(a);
    if (a.schedule_check) checkProgram(p, *a.np, deviceKindFor(a.device));
    return launchRanks(a);
  }
  std::unique_ptr<Bootstrap> boot = createMpiBootstrap();
  int rank = boot->rank(), world = boot->world();
  bool loading = true;
  try {
    if (a.np && *a.np != world)
      throw UsageError(fmt::format("--np {} but the MPI job has {} ranks", *a.np, world));
    Program p = loadWithParams(a);
    SessionOptions so;
    so.device = a.device;
    Session session(*boot, so);
    EvaluatorOptions eo;
    eo.timeout = std::chrono::seconds(a.timeout_s);
    eo.check_schedule = a.schedule_check && !std::getenv("HIR_LAUNCHED_NP");
    eo.trace = !a.trace.empty();
    Evaluator ev(session, p, eo);
    loading = false;

    for (int i = 0; i < a.warmup; ++i) ev.run();
    ev.synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) ev.run();
    ev.synchronize();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count() / a.iters;
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
    int failed = report.ok() ? 0 : 1;
    std::vector<int> all(world);
    boot->allgather(&failed, all.data(), sizeof(int));
    int failed_ranks = 0;
    for (int f : all) failed_ranks += f;
    if (rank == 0) {
      if (failed_ranks == 0)
        std::cout << fmt::format(
            "hir: ok: '{}' on {} rank{} ({}): {} run{}, {} checks passed, {:.3f} ms per run\n",
            p.name, world, world == 1 ? "" : "s", session.device().describe(),
            a.iters + a.warmup, a.iters + a.warmup == 1 ? "" : "s", report.checks_run, ms);
      else
        std::cout << fmt::format("hir: FAILED: '{}': checks failed on {} of {} ranks\n", p.name,
                                 failed_ranks, world);
      if (!a.trace.empty()) std::cout << fmt::format("hir: trace written to {}\n", a.trace);
    }
    return failed_ranks ? kExitCheckFailed : kExitOk;
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
    if (world > 1) boot->abort(e.exitCode());
    return e.exitCode();
  }
}

}  // namespace
}  // namespace hir

int main(int argc, char** argv) {
  using namespace hir;
  try {
    Args a = parseArgs(argc, argv);
    if (a.help) {
      const char* text = a.command == "run"     ? kRunHelp
                         : a.command == "check" ? kCheckHelp
                         : a.command == "print" ? kPrintHelp
                                                : kMainHelp;
      std::cout << text;
      return kExitOk;
    }
    if (a.command == "print") return cmdPrint(a);
    if (a.command == "check") return cmdCheck(a);
    return cmdRun(a);
  } catch (const UsageError& e) {
    printError(e);
    std::cerr << "hir: see `hir --help`\n";
    return kExitBadInput;
  } catch (const Error& e) {
    printError(e);
    return e.exitCode();
  } catch (const InternalError& e) {
    std::cerr << "hir: " << e.what() << "\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "hir: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}
