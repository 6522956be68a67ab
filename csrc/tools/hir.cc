// The `hir` command: run, sweep, check and print hostir programs.
// Exit codes (docs/cli.md): 0 ok, 1 a check failed, 2 bad usage or bad
// program, 3 runtime failure (timeout, device or library error), 4 bug.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <hostir/backend.h>
#include <hostir/bootstrap.h>
#include <hostir/device.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/printer.h>
#include <hostir/session.h>

#include "common/check.h"
#include "compile/compile.h"
#include "device/gpus.h"
#include "runtime/trace.h"
#include "tools/cli.h"
#include "tools/program_input.h"
#include "tools/files.h"
#include "tools/run_output.h"
#include "tools/sweep.h"
#include "transport/fake_nodes.h"
#include "transport/launch.h"
#include "transport/launch_report.h"

namespace hir {
namespace {

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

// The settings of this process, read from the environment once: what the
// launcher checks with, and what each rank's Session reads too (the launcher
// passes every HIR_* variable on to the ranks).
const Settings& processSettings() {
  static const Settings settings = Settings::fromEnvironment();
  return settings;
}

// How `hir` compiles for the ranks it starts, before they start: they are
// processes (under mpirun or torchrun), on nodes not known yet.
CompileOptions launchCompileOptions(int world, const std::string& device, bool check_schedule) {
  return compileOptionsFor(world, device, RankSpace::Processes, check_schedule,
                           processSettings());
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
  if (gpus > 0 && gpuSharingAllowed(processSettings())) return;
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
        info->caps.eager_slots(r.plan.backends[b].settings,
                               largestEagerSend(r.trace, static_cast<int>(b)));
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

// Graph mode needs a device with graphs; said before the program's nodes,
// which a device without them would blame instead.
void requireGraphDevice(const std::string& kind) {
  for (const DeviceInfo& d : registeredDevices())
    if (d.name == kind && !d.graphs)
      throw UsageError(fmt::format("--graph needs a device with graphs (cuda); device '{}' has "
                                   "none",
                                   kind));
}

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
    parseFakeNodes(std::getenv("HIR_FAKE_NODES"));  // what every rank's bootstrap would refuse
    if (a.graph) requireGraphDevice(kind);
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
  const bool sharing = gpuSharingAllowed(processSettings());
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
    so.settings = processSettings();
    Session session(*boot, so);
    EvaluatorOptions eo;
    eo.timeout = std::chrono::milliseconds(a.timeout_ms);
    // Graph mode keeps the check on every rank: it is the proof of capture.
    eo.check_schedule = a.graph || (a.schedule_check && !std::getenv("HIR_LAUNCHED_NP"));
    eo.trace = !a.trace.empty();
    eo.graph = a.graph;
    eo.symmetric_memory = a.symmetric;
    if (a.command == "sweep") {
      const CompileOptions job =
          compileOptionsFor(*boot, session.device().kind(), eo.check_schedule,
                            session.settings());
      SweepPlan plan = planSweep(p, a.sweep, job);
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
