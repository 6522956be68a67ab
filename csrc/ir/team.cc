#include "ir/team.h"

#include "common/check.h"

namespace hir {

std::vector<TeamMember> evaluateTeam(const Team& team, int world,
                                     const std::vector<Param>& params) {
  std::vector<TeamMember> out;
  if (team.all) return out;
  for (std::size_t i = 0; i < team.ranks.size(); ++i) {
    const Expr& e = team.ranks[i];
    TeamMember m;
    try {
      m.rank = e.evaluate([&](std::string_view n) -> std::optional<int64_t> {
        if (n == "world") return world;
        for (const Param& p : params)
          if (p.name == n) return p.value;
        return std::nullopt;
      });
    } catch (const ProgramError& err) {
      m.problem = fmt::format("cannot evaluate '{}': {}", e.str(), err.what());
    }
    if (m.rank && (*m.rank < 0 || *m.rank >= world)) {
      m.problem = fmt::format("team rank '{}' is {}, outside the world [0, {})", e.str(), *m.rank,
                              world);
    } else if (m.rank) {
      for (std::size_t j = 0; j < i; ++j)
        if (out[j].rank == m.rank) {
          m.problem = fmt::format("rank {} is already in the team", *m.rank);
          m.repeats = static_cast<int>(j);
          break;
        }
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace hir
