// Where something happened in a dry run: the node and the values of the
// loop indices around it then (internal to analysis/).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace hir::dry {

// The values of the loop indices around a node, immutable and shared by the
// copies of a Site: the records of a dry run hold one per message, and the
// messages of one collective post (dozens at world 8) all carry the post's.
// One allocation, none outside loops.
class LoopValues {
 public:
  LoopValues() = default;
  explicit LoopValues(std::span<const int64_t> values) : size_(values.size()) {
    if (values.empty()) return;
    auto owned = std::make_shared<int64_t[]>(values.size());
    std::copy(values.begin(), values.end(), owned.get());
    values_ = std::move(owned);
  }
  // scalars[slots[k]] for each k: the loop indices' values where a node runs.
  LoopValues(const std::vector<int>& slots, std::span<const int64_t> scalars)
      : size_(slots.size()) {
    if (slots.empty()) return;
    auto owned = std::make_shared<int64_t[]>(slots.size());
    for (std::size_t k = 0; k < slots.size(); ++k)
      owned[static_cast<std::ptrdiff_t>(k)] = scalars[static_cast<std::size_t>(slots[k])];
    values_ = std::move(owned);
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](std::size_t k) const { return values_[static_cast<std::ptrdiff_t>(k)]; }
  const int64_t* begin() const { return values_.get(); }
  const int64_t* end() const { return values_.get() + size_; }

 private:
  std::shared_ptr<const int64_t[]> values_;
  std::size_t size_ = 0;
};

// Where something happened: the node and the values of the loop indices
// around it then. Formatted only when a message needs it.
struct Site {
  const Plan* plan = nullptr;
  int node = -1;
  LoopValues loop_values;  // one per plan.nodes[node].loop_slots

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
