#include "tools/comm_volume.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "plan/step.h"

namespace hir {

double busBandwidthFactor(CommType type, int n) {
  const double nd = n;
  switch (type) {
    case CommType::Allreduce:
      return n > 0 ? 2.0 * (nd - 1) / nd : 0.0;
    case CommType::Allgather:
    case CommType::ReduceScatter:
    case CommType::Alltoall:
    case CommType::Gather:
    case CommType::Scatter:
      return n > 0 ? (nd - 1) / nd : 0.0;
    case CommType::Broadcast:
    case CommType::Reduce:
    case CommType::Send:
    case CommType::Recv:
      return 1.0;
  }
  return 1.0;
}

int64_t CommVolume::count() const {
  return bytes_max / static_cast<int64_t>(dtypeSize(dtype));
}

int ProgramVolume::dominant() const {
  int best = -1;
  for (std::size_t i = 0; i < comms.size(); ++i)
    if (comms[i].bytes_per_run > 0 && (best < 0 || comms[i].bytes_per_run > comms[best].bytes_per_run))
      best = static_cast<int>(i);
  return best;
}

bool ProgramVolume::dominates(double share) const {
  const int d = dominant();
  if (d < 0) return false;
  int64_t all = 0;
  for (const CommVolume& c : comms) all += c.bytes_per_run;
  return static_cast<double>(comms[d].bytes_per_run) >= share * static_cast<double>(all);
}

namespace {

// Per rank and node: what one run posts.
struct Tally {
  int64_t executions = 0, bytes = 0, min = 0, max = 0;
  int root = -1;
};

// Steps one rank through the plan, counting posts (the executor of step()).
class Walk {
 public:
  Walk(const Plan& plan, int rank, std::vector<Tally>& tally)
      : plan_(plan), rank_(rank), tally_(tally), scalars_(plan.scalar_init),
        layouts_(plan.allocs.size()) {
    scalars_[kRankSlot] = rank;
  }

  // False when `budget` steps were not enough.
  bool run(int64_t& budget) {
    const int size = static_cast<int>(plan_.code.size());
    int pc = 0;
    while (pc >= 0 && pc < size) {
      if (budget-- <= 0) return false;
      pc = step(plan_, pc, scalars_.data(), *this);
    }
    return true;
  }

  void operator()(const instr::Allocate& a, int) {
    Layout l;
    evalLayout(plan_.allocs[a.alloc], scalars_.data(), l);
    layouts_[a.alloc] = std::move(l);
  }
  void operator()(const instr::Deallocate& d, int) { layouts_[d.alloc].reset(); }

  void operator()(const instr::Post& p, int) {
    const PlanComm& c = plan_.comms[p.comm];
    const PlanTeam& team = plan_.teams[c.team];
    if (!isPointToPoint(c.type) && teamRankOf(team, rank_) < 0) return;
    const int64_t in = c.input ? elements(*c.input) : 0;
    const int64_t out = c.output ? elements(*c.output) : 0;
    const int64_t n = static_cast<int64_t>(team.ranks.size());
    int64_t chunk = chunkCount(c, n, in, out);
    switch (c.type) {
      case CommType::Allgather:
      case CommType::ReduceScatter:
      case CommType::Alltoall:
      case CommType::Gather:
      case CommType::Scatter:
        chunk *= n;
        break;
      default:
        break;
    }
    const int64_t bytes =
        chunk * static_cast<int64_t>(dtypeSize(plan_.allocs[c.anyRef().alloc].dtype));
    Tally& t = tally_[p.comm];
    if (t.executions == 0) {
      t.min = t.max = bytes;
      if (hasRoot(c.type)) t.root = team.ranks[rootTeamRank(c, team, scalars_.data())];
    }
    ++t.executions;
    t.bytes += bytes;
    t.min = std::min(t.min, bytes);
    t.max = std::max(t.max, bytes);
  }

  // Nothing else moves data between ranks.
  template <class Op>
  void operator()(const Op&, int) {}

 private:
  int64_t elements(const PlanRef& ref) const {
    const std::optional<Layout>& l = layouts_[ref.alloc];
    if (!l) return 0;  // not allocated on this rank: the run would have failed
    return resolveRef(ref, *l, scalars_.data()).count;
  }

  const Plan& plan_;
  int rank_;
  std::vector<Tally>& tally_;
  std::vector<int64_t> scalars_;
  std::vector<std::optional<Layout>> layouts_;
};

}  // namespace

ProgramVolume commVolumes(const Plan& plan, int64_t max_steps) {
  ProgramVolume v;
  const std::size_t comms = plan.comms.size();
  std::vector<std::vector<Tally>> per_rank(static_cast<std::size_t>(plan.world),
                                           std::vector<Tally>(comms));
  int64_t budget = max_steps;
  for (int r = 0; r < plan.world; ++r) {
    Walk walk(plan, r, per_rank[r]);
    if (!walk.run(budget)) {
      v.complete = false;
      v.why = fmt::format("one run of every rank takes more than {} steps; the bytes each "
                          "communication moves were not counted",
                          max_steps);
      return v;
    }
  }
  for (std::size_t i = 0; i < comms; ++i) {
    const PlanComm& c = plan.comms[i];
    CommVolume cv;
    cv.comm = static_cast<int>(i);
    cv.name = c.name;
    cv.path = plan.nodes[c.node].path;
    cv.backend = plan.backends[c.backend].name;
    cv.type = c.type;
    cv.dtype = plan.allocs[c.anyRef().alloc].dtype;
    const bool reduces = c.type == CommType::Allreduce || c.type == CommType::Reduce ||
                         c.type == CommType::ReduceScatter;
    cv.reduce = reduces ? std::string(toString(c.reduce)) : "none";
    cv.team_size = static_cast<int>(plan.teams[c.team].ranks.size());
    cv.busbw_factor = busBandwidthFactor(c.type, cv.team_size);
    int best = 0;
    for (int r = 1; r < plan.world; ++r)
      if (per_rank[r][i].bytes > per_rank[best][i].bytes) best = r;
    const Tally& t = per_rank[best][i];
    cv.rank = best;
    cv.executions = t.executions;
    cv.bytes_per_run = t.bytes;
    cv.bytes_min = t.min;
    cv.bytes_max = t.max;
    cv.root = t.root;
    v.comms.push_back(std::move(cv));
  }
  return v;
}

}  // namespace hir
