#include "compile/compile.h"

#include <algorithm>

#include <hostir/kernel.h>

#include "analysis/validate.h"
#include "common/check.h"
#include "lower/lower.h"

namespace hir {

CompiledProgram compile(const Program& program, const CompileOptions& options) {
  std::vector<BackendCaps> catalog =
      options.backends.empty() ? backendCatalog() : options.backends;
  validate(program, ValidateOptions{options.world, catalog,
                                    options.kernels ? *options.kernels : kernelNames()});
  CompiledProgram out;
  out.plan = lower(program, LowerOptions{options.world, options.device, std::move(catalog),
                                         options.settings});
  const Plan& plan = out.plan;

  ScheduleCheckOptions check;
  check.max_steps_per_rank = options.max_steps_per_rank;
  // Node names may cost an allgather: only for programs that care.
  const bool node_bound = std::any_of(plan.comms.begin(), plan.comms.end(),
                                      [](const PlanComm& c) { return !c.cross_node_why.empty(); });
  if (node_bound && options.nodes) check.nodes = options.nodes();
  const bool peer_mapped = std::any_of(plan.backends.begin(), plan.backends.end(),
                                       [](const PlanBackend& b) { return b.maps_peer_memory; });
  check.want_trace = peer_mapped;
  if (options.check_schedule) {
    ScheduleCheckResult r = checkSchedule(plan, check);
    out.checked = true;
    out.truncated = r.truncated;
    out.steps_per_rank = r.steps_per_rank;
    out.communications = r.communications;
    out.notes = std::move(r.notes);
    out.capture_blocker = std::move(r.capture_blocker);
    if (peer_mapped) out.trace = std::move(r.p2p);
  } else if (peer_mapped) {
    out.trace = traceP2p(plan, check);
    checkPeerNodes(plan, out.trace, check.nodes);  // unchecked programs still get this rule
  }
  return out;
}

CompileOptions compileOptionsFor(int world, std::string_view device, RankSpace space,
                                 bool check_schedule, const Settings& settings,
                                 std::function<std::vector<std::string>()> nodes) {
  CompileOptions co;
  co.world = world;
  co.device = std::string(device);
  co.check_schedule = check_schedule;
  co.settings = settings;
  co.backends = backendCatalog(space);
  co.nodes = std::move(nodes);
  return co;
}

CompileOptions compileOptionsFor(Bootstrap& bootstrap, std::string_view device,
                                 bool check_schedule, const Settings& settings) {
  std::function<std::vector<std::string>()> nodes;
  if (bootstrap.world() > 1) nodes = [&bootstrap] { return bootstrap.nodes(); };
  return compileOptionsFor(bootstrap.world(), device, bootstrap.rankSpace(), check_schedule,
                           settings, std::move(nodes));
}

void requireCapturable(const CompiledProgram& compiled) {
  HIR_CHECK_AS(UsageError, compiled.checked,
               "graph mode needs the cross-rank check, which proves that a run can be captured "
               "and that every rank captures the same communications; it was turned off "
               "(check_schedule = false, or --no-schedule-check)");
  HIR_CHECK_AS(UsageError, !compiled.truncated,
               "graph mode needs the cross-rank check to cover whole runs, but it covered only "
               "the first {} steps of each rank's run (a run this long cannot be proven "
               "capturable)",
               compiled.steps_per_rank);
  if (compiled.capture_blocker) {
    ValidationError::Issue issue = *compiled.capture_blocker;
    issue.message = "a run cannot be captured into a graph: " + issue.message;
    throw ValidationError({std::move(issue)});
  }
}

}  // namespace hir
