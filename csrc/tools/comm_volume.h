// What each communication node of a program moves in one run, counted as
// nccl-tests counts it, for `hir run --json` and `hir sweep`
// (docs/cli.md, "Results as JSON").
//
// The size of one execution is nccl-tests' "size": allreduce, broadcast,
// reduce, send, recv: the buffer (count x dtype size); allgather, gather:
// the gathered buffer; reduce_scatter, scatter: the buffer scattered from;
// alltoall: a rank's whole input (chunk x team size x dtype size, for those
// four). Bus bandwidth is algorithm bandwidth times nccl-tests' factor for
// the type and the team size n: allreduce 2(n-1)/n; allgather,
// reduce_scatter, alltoall, gather, scatter (n-1)/n; broadcast, reduce,
// send, recv 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hostir/types.h>

#include "plan/plan.h"

namespace hir {

struct CommVolume {
  int comm = -1;  // index into Plan::comms
  std::string name, path, backend;
  CommType type = CommType::Allreduce;
  DType dtype = DType::Float32;
  std::string reduce;  // "sum", ... or "none" for a type that does not reduce
  int root = -1;       // world rank of the first execution's root, -1 without one
  int team_size = 1;
  // On the rank where the node moves the most bytes per run (the lowest
  // such rank): its executions per run and their sizes in bytes.
  int rank = 0;
  int64_t executions = 0;
  int64_t bytes_per_run = 0;
  int64_t bytes_min = 0, bytes_max = 0;  // of one execution
  double busbw_factor = 1.0;
  // Elements of one execution's size (bytes_max / dtype size): nccl-tests'
  // "count".
  int64_t count() const;
};

struct ProgramVolume {
  std::vector<CommVolume> comms;  // every communication node, in plan order
  // False when the walk was cut short (more than `max_steps` steps over all
  // ranks); `why` then says so and `comms` is empty.
  bool complete = true;
  std::string why;
  // The node that moves the most bytes per run (the first such), or -1.
  int dominant() const;
  // Whether dominant() moves at least `share` of all bytes per run.
  bool dominates(double share) const;
};

// nccl-tests' bus bandwidth factor of `type` for a team of `n` ranks.
double busBandwidthFactor(CommType type, int n);

// Steps every rank of `plan` through one run (plan/step.h, no device) and
// counts what each communication node posts. Throws ProgramError when a
// shape or reference does not evaluate (compile() would have said so).
ProgramVolume commVolumes(const Plan& plan, int64_t max_steps = 20'000'000);

}  // namespace hir
