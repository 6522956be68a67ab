// The one compile pipeline: validate, lower, run the cross-rank check, and
// trace the point-to-point messages that backends mapping peer memory need.
// Everything here is the same on every rank; the Evaluator, `hir run` and
// `hir check` all go through compile().
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/backend.h>
#include <hostir/bootstrap.h>
#include <hostir/program.h>

#include "analysis/schedule_check.h"
#include "plan/plan.h"

namespace hir {

struct CompileOptions {
  int world = 1;
  std::string device = "host";        // device kind the backends are bound for
  // What "backend" may name. Empty: every registered backend
  // (backendCatalog()).
  std::vector<BackendCaps> backends;
  // What "kernel" nodes may name. nullopt: every registered kernel
  // (kernelNames()).
  std::optional<std::vector<std::string>> kernels;
  // Run the cross-rank check (ValidationError listing every problem). Off,
  // the point-to-point trace is still made when a backend needs it.
  bool check_schedule = true;
  int64_t max_steps_per_rank = ScheduleCheckOptions{}.max_steps_per_rank;
  // The node of each rank (Bootstrap::nodes()), asked only when the program
  // binds a communication to a backend that reaches its own node only; null
  // or empty: every rank on one node.
  std::function<std::vector<std::string>()> nodes;
  // The settings the bound backends decide by (ipc's eager and one-shot
  // limits): the session's, so that the check and the run agree.
  Settings settings;
};

struct CompiledProgram {
  Plan plan;
  bool checked = false;        // the cross-rank check ran and passed
  bool truncated = false;      // it covered only a prefix of a long run ...
  int64_t steps_per_rank = 0;  // ... of this many steps per rank
  int64_t communications = 0;  // posts over all ranks in one run (when checked)
  // What the check found legal but likely unmeant (ScheduleCheckResult::notes).
  std::vector<ValidationError::Issue> notes;
  // When checked: what stops a graph capture (ScheduleCheckResult::capture_blocker).
  std::optional<ValidationError::Issue> capture_blocker;
  // Matched send/recv of one run, when a bound backend maps peer memory.
  P2pTrace trace;
};

// Throws ParseError, ValidationError or ProgramError naming the place.
CompiledProgram compile(const Program& program, const CompileOptions& options);

// The options of a compile for a job of `world` ranks that live in
// `space` (Bootstrap::rankSpace()), binding backends for devices of kind
// `device`: the catalog of the backends that can connect such ranks
// (backendCatalog(space)), and the ranks' nodes when they are known
// (CompileOptions::nodes). Every compile of a job is made with these, the
// Evaluator's on each rank and `hir`'s before it starts the ranks alike,
// so that all bind the same backends.
CompileOptions compileOptionsFor(int world, std::string_view device, RankSpace space,
                                 bool check_schedule, const Settings& settings,
                                 std::function<std::vector<std::string>()> nodes = nullptr);
// The same for the job of `bootstrap`: its world, rank space and nodes.
CompileOptions compileOptionsFor(Bootstrap& bootstrap, std::string_view device,
                                 bool check_schedule, const Settings& settings);

// What graph mode (EvaluatorOptions::graph, `hir run --graph`) needs of a
// compiled program: the cross-rank check ran over whole runs (UsageError
// otherwise) and found nothing that stops a capture (ValidationError naming
// the node).
void requireCapturable(const CompiledProgram& compiled);

}  // namespace hir
