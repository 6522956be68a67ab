// Lowering: Program -> Plan (see plan.h).
#pragma once

#include <string>
#include <vector>

#include <hostir/program.h>
#include "plan/plan.h"

namespace hir {

struct LowerOptions {
  int world = 1;
  std::string device = "host";          // device kind, for backend selection
  // Node identity of each rank (size world), for ipc locality; empty: one node.
  std::vector<std::string> nodes;
};

// Requires a validated program (analysis/validate.h). Throws ProgramError or
// ValidationError for what only lowering can see (a team rank outside the
// world, no backend for a communication).
Plan lower(const Program& program, const LowerOptions& options);

}  // namespace hir
