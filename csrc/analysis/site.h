// Where something happened in a dry run: the node and the values of the
// loop indices around it then (internal to analysis/).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace hir::dry {

// Where something happened: the node and the values of the loop indices
// around it then. Formatted only when a message needs it.
struct Site {
  const Plan* plan = nullptr;
  int node = -1;
  std::vector<int64_t> loop_values;  // one per plan.nodes[node].loop_slots

  const std::string& path() const { return plan->nodes[node].path; }
  // "i=2, j=0", or empty outside loops.
  std::string loops() const {
    const std::vector<int>& slots = plan->nodes[node].loop_slots;
    std::string out;
    for (std::size_t k = 0; k < slots.size(); ++k)
      out += fmt::format("{}{}={}", k ? ", " : "", plan->scalar_names[slots[k]], loop_values[k]);
    return out;
  }
  std::string str() const {
    std::string l = loops();
    return l.empty() ? path() : fmt::format("{}, {}", path(), l);
  }
};

}  // namespace hir::dry
