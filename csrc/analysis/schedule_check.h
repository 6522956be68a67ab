// The cross-rank check: runs a Plan "dry" (no device, no data) once per rank
// 0..world-1, evaluating every expression with that rank's values, then
// compares what the ranks would do. Finds, with node path, rank and loop
// indices:
// - per rank: references out of their allocation, shapes that do not fit the
//   communication type for the team size (allgather output = team size x
//   input, ...), dtype mismatches, roots and peers outside the team or the
//   world, waits on communications not posted, streams out of range, copies
//   of unequal sizes, ipc-shared allocations whose shape differs by rank;
// - across ranks: collectives of each team in the same order with the same
//   type, root, count, dtype and reduce op; every send matched by a recv of
//   the same size and dtype, on the same backend with the same protocol, in
//   the same order per pair of ranks; share_mem_handles and the allocations
//   of ipc-shared buffers in the same order with the same shapes; no peer
//   on another node for a backend that reaches only its own node (ipc);
// - hazards: a tensor read, written or deallocated while a communication
//   writing it is still pending (not waited), or written while one reading
//   it is pending.
// Throws ValidationError listing every problem (capped at 20).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <hostir/error.h>

#include "plan/plan.h"
#include "plan/trace.h"

namespace hir {

struct ScheduleCheckOptions {
  // Stop simulating a rank after this many executed instructions; the check
  // then covers only the prefix (and says so through `truncated`).
  int64_t max_steps_per_rank = 4'000'000;
  // And after this many over all ranks: each rank then gets an equal share
  // (at least 2,000 steps), so that time and memory stay bounded at any
  // world size (docs/ir.md gives the figures).
  int64_t max_steps_total = 16'000'000;
  // Make the p2p trace of the result (only backends that map peer memory
  // need it; it costs a record per message).
  bool want_trace = true;
  // Node identity of each rank (Bootstrap::nodes()); empty: one node.
  std::vector<std::string> nodes;
};

struct ScheduleCheckResult {
  bool truncated = false;
  int64_t steps_per_rank = 0;  // the bound each rank ran under
  int64_t communications = 0;  // posts over all ranks
  P2pTrace p2p;
  // Legal but likely unmeant, one per node (capped at 20): a communication
  // or group whose latest post no wait follows on some rank (the run joins
  // it at its end).
  std::vector<ValidationError::Issue> notes;
  // What stops a run of the plan from being captured into a graph and
  // replayed (the first such instruction over all ranks, with a sentence
  // saying why): a host-mode wait, a post on a backend that is not
  // capturable, an allocation whose size changes within a run. Empty: a
  // run can be captured, and the checks above prove that every rank
  // captures the same communications in the same order.
  std::optional<ValidationError::Issue> capture_blocker;
};

ScheduleCheckResult checkSchedule(const Plan& plan, const ScheduleCheckOptions& options = {});

// The dry run alone: the trace of checkSchedule() without the checks (for an
// evaluator that skips them). Messages that did not resolve are left out.
P2pTrace traceP2p(const Plan& plan, const ScheduleCheckOptions& options = {});

// The node rule of checkSchedule() alone, over a trace: a send/recv whose
// backend reaches only its own node (PlanComm::cross_node_why) with a peer on
// another node. Throws ValidationError naming node path, ranks and nodes.
void checkPeerNodes(const Plan& plan, const P2pTrace& trace, const std::vector<std::string>& nodes);

}  // namespace hir
