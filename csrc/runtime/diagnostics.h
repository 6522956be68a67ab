// What the evaluator says about a run (internal to runtime/): where an
// instruction is (node path, rank, loop indices), what is still pending when
// a run times out, and the results of the check nodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hostir/device.h>
#include <hostir/evaluator.h>

#include "plan/plan.h"
#include "runtime/run_state.h"

namespace hir {

class Diagnostics {
 public:
  Diagnostics(const Plan& plan, Device& dev, int rank);
  ~Diagnostics();
  Diagnostics(const Diagnostics&) = delete;
  Diagnostics& operator=(const Diagnostics&) = delete;

  // "i=2, j=0": the loop indices around `node`, from `values` (one per loop
  // slot of the node), or empty outside loops.
  std::string loopContext(int node, const int64_t* values) const;
  // "PATH: on rank R (i=2)", with the loop indices now in `scalars`.
  std::string where(int node, const int64_t* scalars) const;
  // The loop indices around `node` now, into `out` (one per loop slot).
  void loopValues(int node, const int64_t* scalars, std::vector<int64_t>& out) const;

  // What this rank still waits for, with node paths and loop indices. A
  // joined post has no done event: it is listed while its stream has not
  // finished.
  std::string pendingReport(const std::vector<CommState>& comms, Streams& streams) const;

  // Check nodes: the record each writes to, and the execution number of a
  // new execution of check `check` with the loop indices in `scalars`.
  CheckRecord* record(int check) { return &records_[check]; }
  int64_t beginCheck(int check, const int64_t* scalars);
  RunReport report() const;

 private:
  const Plan& plan_;
  Device& dev_;
  int rank_;
  CheckRecord* records_ = nullptr;
  std::vector<int64_t> check_executions_;
  std::vector<std::vector<int64_t>> check_contexts_;  // per check: flat loop values
};

}  // namespace hir
