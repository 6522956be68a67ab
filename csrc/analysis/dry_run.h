// The dry run of the cross-rank check (internal to analysis/): every rank
// steps through the plan with the shared core (plan/step.h), with shapes but
// no memory, and records what it would post. schedule_check.cc compares the
// records across ranks.
//
// A problem found at one instruction is reported once, for the first rank
// and loop iteration that hits it (ranks run in order 0, 1, ...): the same
// mistake on every rank would otherwise fill the capped list.
#pragma once

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "analysis/schedule_check.h"
#include "analysis/progress.h"
#include "analysis/site.h"
#include "common/check.h"
#include "plan/plan.h"

namespace hir::dry {

using Issue = ValidationError::Issue;

constexpr std::size_t kMaxIssues = 20;

// A contiguous span of an allocation, in elements.
struct Range {
  int alloc = -1;
  int64_t offset = 0;
  int64_t count = 0;
};

struct CollectiveRecord {
  CommType type;
  std::optional<int64_t> count;  // input elements; unknown when the input did not resolve
  DType dtype;
  ReduceOp reduce;
  std::optional<int64_t> root;  // absolute rank
  Site site;
  int part = -1;  // participation node in the wait-for graph
  // A collective run as messages (BackendCaps::collective_messages): the
  // algorithm the backend picked for it on this rank.
  std::string_view algorithm;
};

// One send or recv, or one message of a collective run as messages. The
// check holds one per message end (two per message), so its fields go
// widest first: 120 bytes, not 136.
struct MessageRecord {
  Site site;
  std::optional<Range> range;  // unknown when the tensor did not resolve
  std::optional<int64_t> count;
  // A collective's message: the collective's team and its number among that
  // team's collectives on this rank (both ends must be of the same one).
  int64_t instance = -1;
  int team = -1;
  int comm = -1;
  int backend = -1;
  int part = -1;  // participation node in the wait-for graph (-1: a collective's message)
  DType dtype = DType::Float32;
  Protocol protocol = Protocol::Put;  // auto resolved (PlanBackend::protocolFor)
  bool collective = false;  // a message of collective `comm`, not a send or recv
};

// What must happen in the same order on every rank for peer-mapped memory:
// share_mem_handles (collective) and allocations of peer-mapped buffers (their blocks are what
// is exchanged, so every rank must know when a peer's block changes).
struct IpcEvent {
  int pc = -1;
  int alloc = -1;  // -1: a share_mem_handles
  std::vector<int64_t> shape;
  Site site;
  int part = -1;  // a share_mem_handles: participation node in the wait-for graph
};

// What all ranks recorded, and the issues so far.
class Findings {
 public:
  explicit Findings(const Plan& plan) : collectives_(plan.teams.size()), ipc_events_(plan.world) {
    for (std::size_t t = 0; t < plan.teams.size(); ++t)
      collectives_[t].resize(plan.teams[t].ranks.size());
  }

  // Whether this is the first problem of `kind` at instruction `pc`
  // (problems of one kind at one instruction are reported once).
  bool firstAt(int pc, const std::string& kind) { return reported_.insert({pc, kind}).second; }

  // Keeps at most kMaxIssues entries: past the cap, the last entry becomes a
  // note at the first problem not listed, saying how many were left out.
  void add(std::string path, std::string message) {
    if (issues_.size() < kMaxIssues) {
      issues_.push_back({std::move(path), std::move(message)});
      return;
    }
    ++dropped_;
    issues_.back().message =
        fmt::format("{} more problems, the first at this node (the list is capped at {} entries)",
                    dropped_ + 1, kMaxIssues);
  }

  std::vector<std::vector<std::vector<CollectiveRecord>>> collectives_;  // [team][team rank]
  std::map<std::pair<int, int>, std::vector<MessageRecord>> sends_;           // (from, to)
  std::map<std::pair<int, int>, std::vector<MessageRecord>> recvs_;           // (from, to): on `to`
  std::vector<std::vector<IpcEvent>> ipc_events_;                       // [rank]
  WaitGraph graph_;
  std::vector<Issue> issues_;
  // Not errors: communications still pending when a rank's run ends (the
  // run joins them), one per communication or group, capped like issues_.
  std::vector<Issue> notes_;
  std::set<int> noted_units_;
  // Not an error: the first thing of a run, over all ranks, that a graph
  // could not replay (ScheduleCheckResult::capture_blocker).
  std::optional<Issue> capture_blocker_;
  bool truncated_ = false;
  int64_t steps_per_rank_ = 0;  // the bound each rank ran under
  int64_t posts_ = 0;
  int64_t dropped_ = 0;

 private:
  std::set<std::pair<int, std::string>> reported_;
};

// Runs every rank of `plan` dry and returns what they recorded, with the
// per-rank problems found on the way.
Findings simulate(const Plan& plan, const ScheduleCheckOptions& options);

bool overlaps(const Range& a, const Range& b);
std::string listInts(const std::vector<int64_t>& v);

}  // namespace hir::dry
