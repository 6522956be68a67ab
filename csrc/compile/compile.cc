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
  out.plan = lower(program, LowerOptions{options.world, options.device, std::move(catalog)});
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
    if (peer_mapped) out.trace = std::move(r.p2p);
  } else if (peer_mapped) {
    out.trace = traceP2p(plan, check);
    checkPeerNodes(plan, out.trace, check.nodes);  // unchecked programs still get this rule
  }
  return out;
}

}  // namespace hir
