// Teams are fixed at load: their ranks are evaluated once, over world and
// params only. One evaluation for validation (which reports every problem)
// and lowering (which builds the team from it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <hostir/program.h>

namespace hir {

struct TeamMember {
  std::optional<int64_t> rank;  // nullopt: the expression could not be evaluated
  std::string problem;          // empty: a rank of the world, not repeated
  int repeats = -1;             // the index of the earlier entry with this rank
};

// One entry per expression of team.ranks (none for team "all"). A problem
// says what is wrong with that entry: it does not evaluate (an unknown name,
// a division by zero), is outside [0, world), or repeats an earlier rank.
std::vector<TeamMember> evaluateTeam(const Team& team, int world,
                                     const std::vector<Param>& params);

}  // namespace hir
