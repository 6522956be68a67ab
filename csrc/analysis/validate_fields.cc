// Which fields each communication type takes (see validate_fields.h).
#include "analysis/validate_fields.h"

#include <fmt/format.h>

#include "analysis/validate_declarations.h"  // fieldPath

namespace hir {

void checkCommFields(const Communication& c, const std::string& path,
                     std::vector<ValidationError::Issue>& issues) {
  const std::string_view type = toString(c.type);
  auto need = [&](bool present, std::string_view field) {
    if (!present) issues.push_back({path, fmt::format("{} needs '{}'", type, field)});
  };
  auto forbid = [&](bool present, std::string_view field, std::string_view why) {
    if (present)
      issues.push_back(
          {fieldPath(path, field), fmt::format("{} takes no '{}'{}", type, field, why)});
  };
  if (isPointToPoint(c.type)) {
    need(c.tensor.has_value(), "tensor");
    need(c.peer.has_value(), "peer");
    forbid(c.input.has_value(), "input", " (send/recv move 'tensor')");
    forbid(c.output.has_value(), "output", " (send/recv move 'tensor')");
    forbid(c.root.has_value(), "root", "");
    forbid(c.reduce.has_value(), "reduce", "");
    if (!c.team.all)
      issues.push_back(
          {fieldPath(path, "team"), "send/recv have no team; the peer is an absolute rank"});
    return;
  }
  need(c.input.has_value(), "input");
  need(c.output.has_value(), "output");
  forbid(c.tensor.has_value(), "tensor", " (collectives read 'input' and write 'output')");
  forbid(c.peer.has_value(), "peer", " (collectives run over a team)");
  if (hasRoot(c.type))
    need(c.root.has_value(), "root");
  else
    forbid(c.root.has_value(), "root", "");
  if (hasReduceOp(c.type))
    need(c.reduce.has_value(), "reduce");
  else
    forbid(c.reduce.has_value(), "reduce", "");
}

}  // namespace hir
