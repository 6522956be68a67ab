#include "runtime/diagnostics.h"

#include <array>

#include "common/check.h"

namespace hir {
namespace {

// Loop contexts of check executions are kept for this many executions per
// check node; later failures are reported by execution number.
constexpr int64_t kMaxCheckContexts = 4096;

}  // namespace

Diagnostics::Diagnostics(const Plan& plan, Device& dev, int rank)
    : plan_(plan), dev_(dev), rank_(rank) {
  if (!plan.checks.empty()) records_ = dev.allocateCheckRecords(plan.checks.size());
  check_executions_.assign(plan.checks.size(), 0);
  check_contexts_.resize(plan.checks.size());
}

Diagnostics::~Diagnostics() {
  if (!records_) return;
  try {
    dev_.freeCheckRecords(records_);
  } catch (const std::exception&) {
    // Teardown after a device failure: the error that matters was reported.
  }
}

std::string Diagnostics::loopContext(int node, const int64_t* values) const {
  const PlanNode& n = plan_.nodes[node];
  std::string out;
  for (std::size_t i = 0; i < n.loop_slots.size(); ++i)
    out += fmt::format("{}{}={}", out.empty() ? "" : ", ", plan_.scalar_names[n.loop_slots[i]],
                       values[i]);
  return out;
}

void Diagnostics::loopValues(int node, const int64_t* scalars, std::vector<int64_t>& out) const {
  const std::vector<int>& slots = plan_.nodes[node].loop_slots;
  out.resize(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) out[i] = scalars[slots[i]];
}

std::string Diagnostics::where(int node, const int64_t* scalars) const {
  std::vector<int64_t> values;
  loopValues(node, scalars, values);
  std::string ctx = loopContext(node, values.data());
  return fmt::format("{}: on rank {}{}", plan_.nodes[node].path, rank_,
                     ctx.empty() ? "" : fmt::format(" ({})", ctx));
}

std::string Diagnostics::pendingReport(const std::vector<CommState>& comms,
                                       Streams& streams) const {
  std::string out = fmt::format("rank {}: pending communications:", rank_);
  std::array<int, kMaxStreams> stream_busy;
  stream_busy.fill(-1);  // -1: not asked yet, 0: finished, 1: busy
  auto busy = [&](int k) {
    if (stream_busy[k] < 0) {
      stream_busy[k] = 0;
      try {
        if (streams[k].stream && streams[k].event) {
          dev_.record(*streams[k].event, *streams[k].stream);
          stream_busy[k] = dev_.query(*streams[k].event) ? 0 : 1;
        }
      } catch (const std::exception&) {
        stream_busy[k] = 1;
      }
    }
    return stream_busy[k] == 1;
  };
  int n = 0;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const CommState& c = comms[i];
    if (c.state != PostState::Posted) continue;
    bool done = false;
    if (c.last_done) {
      try {
        done = dev_.query(*c.last_done);
      } catch (const std::exception&) {
      }
    } else {
      done = c.joined_on < 0 || !busy(c.joined_on);
    }
    if (done) continue;
    const PlanComm& pc = plan_.comms[i];
    std::string ctx = loopContext(pc.node, c.loop_values.data());
    out += fmt::format("\n  '{}' ({}) at {}{}{}", pc.name, toString(pc.type),
                       plan_.nodes[pc.node].path, ctx.empty() ? "" : " (" + ctx + ")",
                       c.last_done ? ""
                                   : fmt::format(", on stream {}, which has not finished",
                                                 c.joined_on));
    ++n;
  }
  if (n == 0) out += " none (a stream is stuck on other work)";
  return out;
}

int64_t Diagnostics::beginCheck(int check, const int64_t* scalars) {
  const int64_t exec = check_executions_[check]++;
  if (exec < kMaxCheckContexts)
    for (int slot : plan_.nodes[plan_.checks[check].node].loop_slots)
      check_contexts_[check].push_back(scalars[slot]);
  return exec;
}

RunReport Diagnostics::report() const {
  RunReport r;
  for (std::size_t i = 0; i < plan_.checks.size(); ++i) {
    const CheckRecord& rec = records_[i];
    r.checks_run += static_cast<uint64_t>(check_executions_[i]);
    r.elements_checked += rec.checked;
    if (rec.mismatches == 0) continue;
    const PlanNode& node = plan_.nodes[plan_.checks[i].node];
    CheckFailure f;
    f.rank = rank_;
    f.path = node.path;
    f.tensor = plan_.checks[i].tensor;
    f.mismatches = rec.mismatches;
    const int64_t exec = rec.first_execution;
    const std::size_t depth = node.loop_slots.size();
    if (exec >= 0 && exec < kMaxCheckContexts && depth > 0 &&
        (exec + 1) * static_cast<int64_t>(depth) <=
            static_cast<int64_t>(check_contexts_[i].size())) {
      f.context = loopContext(plan_.checks[i].node, &check_contexts_[i][exec * depth]);
    } else if (exec >= 0 && depth > 0) {
      f.context = fmt::format("execution #{}", exec);
    }
    for (int k = 0; k < rec.reported && k < CheckRecord::kMaxReported; ++k)
      f.first.push_back({rec.index[k], rec.got[k], rec.expected[k]});
    r.failures.push_back(std::move(f));
  }
  return r;
}

}  // namespace hir
