// Lowering: Program -> Plan (see plan.h).
#pragma once

#include <string>
#include <vector>

#include <hostir/backend.h>
#include <hostir/program.h>

#include "plan/plan.h"

namespace hir {

struct LowerOptions {
  int world = 1;
  std::string device = "host";         // device kind, for backend selection
  std::vector<BackendCaps> backends;   // what "backend" may name; "auto" picks among them
  Settings settings;                   // given to each bound backend (PlanBackend::settings)
};

// Requires a validated program (analysis/validate.h). Throws ProgramError or
// ValidationError for what only lowering can see (a team rank outside the
// world, no backend for a communication).
Plan lower(const Program& program, const LowerOptions& options);

}  // namespace hir
