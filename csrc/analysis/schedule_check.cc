// The cross-rank schedule check (see schedule_check.h): every rank runs
// dry (dry_run.h); the recorded collectives, send/recv and peer-memory
// events are then compared across ranks here.
#include "analysis/schedule_check.h"

#include <algorithm>
#include <set>

#include "analysis/dry_run.h"
#include "plan/step.h"

namespace hir {
namespace {

using namespace dry;

std::string describe(const CollectiveRecord& c) {
  std::string out = fmt::format("{} of ", toString(c.type));
  out += c.count ? fmt::format("{} {}", *c.count, toString(c.dtype))
                 : fmt::format("an unknown number of {}", toString(c.dtype));
  if (hasReduceOp(c.type)) out += fmt::format(" with {}", toString(c.reduce));
  if (hasRoot(c.type))
    out += c.root ? fmt::format(" from root {}", *c.root) : std::string(" from an unknown root");
  if (!c.algorithm.empty()) out += fmt::format(", {}", c.algorithm);
  return out;
}

// Unknown counts and roots (already reported on their rank) match anything.
bool sameCollective(const CollectiveRecord& a, const CollectiveRecord& b) {
  if (a.type != b.type || a.dtype != b.dtype) return false;
  if (a.count && b.count && *a.count != *b.count) return false;
  if (hasReduceOp(a.type) && a.reduce != b.reduce) return false;
  if (hasRoot(a.type) && a.root && b.root && *a.root != *b.root) return false;
  // Refused on a rank (reported there): nothing to compare.
  if (!a.algorithm.empty() && !b.algorithm.empty() && a.algorithm != b.algorithm) return false;
  return true;
}

std::string describe(const MessageRecord& m) {
  return m.count ? fmt::format("{} {}", *m.count, toString(m.dtype))
                 : fmt::format("an unknown number of {}", toString(m.dtype));
}

std::string plural(int64_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}


// ------------------------------------------------------------ across ranks
// Every member of a team posts the same collectives in the same order.
void matchCollectives(const Plan& plan, Findings& f) {
  for (std::size_t t = 0; t < plan.teams.size(); ++t) {
    const PlanTeam& team = plan.teams[t];
    if (team.ranks.empty()) continue;
    const auto& seqs = f.collectives_[t];  // by team rank
    const int members = static_cast<int>(team.ranks.size());
    std::size_t common = seqs[0].size();
    for (const auto& seq : seqs) common = std::min(common, seq.size());

    bool reported = false;
    for (std::size_t k = 0; k < common && !reported; ++k) {
      for (int i = 1; i < members; ++i) {
        const CollectiveRecord &a = seqs[0][k], &b = seqs[i][k];
        if (sameCollective(a, b)) continue;
        f.add(a.site.path(),
              fmt::format("{}: collective #{} differs: rank {} posts {} ({}) but rank {} posts {} "
                          "({})",
                          teamName(team), k + 1, team.ranks[0], describe(a), a.site.str(),
                          team.ranks[i], describe(b), b.site.str()));
        reported = true;
        break;
      }
    }
    // A truncated rank ran only a prefix: counts cannot be compared.
    if (reported || f.truncated_) continue;
    auto [lo, hi] = std::minmax_element(seqs.begin(), seqs.end(), [](const auto& a, const auto& b) {
      return a.size() < b.size();
    });
    if (lo->size() == hi->size()) continue;
    const int lo_rank = team.ranks[lo - seqs.begin()], hi_rank = team.ranks[hi - seqs.begin()];
    const CollectiveRecord& first = (*hi)[lo->size()];
    f.add(first.site.path(),
          fmt::format("rank {} posts {} on {}, rank {} posts {}; the first unmatched is {} on "
                      "rank {} ({})",
                      lo_rank, plural(lo->size(), "collective"), teamName(team), hi_rank,
                      hi->size(), describe(first), hi_rank, first.site.str()));
  }
}

// How the send and the recv of a message disagree, as the two halves of a
// sentence ("rank 0's send ... <first> rank 1's recv ... <second>"), or
// nothing when they agree.
std::optional<std::pair<std::string, std::string>> mismatch(const Plan& plan,
                                                            const MessageRecord& a,
                                                            const MessageRecord& b) {
  // A collective run as messages pairs only with its own messages on the
  // other member.
  if (a.collective || b.collective) {
    auto what = [&](const MessageRecord& m) {
      const PlanComm& c = plan.comms[m.comm];
      return m.collective ? fmt::format("a message of {} '{}'", toString(c.type), c.name)
                          : fmt::format("{} '{}'", toString(c.type), c.name);
    };
    if (a.collective != b.collective || a.team != b.team || a.instance != b.instance)
      return std::pair(fmt::format("is {} but", what(a)),
                       fmt::format("is {}; backend '{}' runs collectives as messages between the "
                                   "pair's ranks, so both must order them and their sends and "
                                   "recvs with each other alike",
                                   what(b), plan.backends[a.backend].name));
  }
  if (a.dtype != b.dtype || (a.count && b.count && *a.count != *b.count))
    return std::pair(fmt::format("carries {} but", describe(a)),
                     fmt::format("expects {}", describe(b)));
  if (a.backend != b.backend)
    return std::pair(fmt::format("uses backend '{}' but", plan.backends[a.backend].name),
                     fmt::format("uses backend '{}'; a send and its recv need the same backend",
                                 plan.backends[b.backend].name));
  if (a.protocol != b.protocol)
    return std::pair(fmt::format("uses protocol '{}' but", toString(a.protocol)),
                     fmt::format("uses protocol '{}'; a send and its recv need the same protocol "
                                 "(auto is decided by size: on ipc, eager up to "
                                 "HIR_IPC_EAGER_SEND_MAX bytes, put above)",
                                 toString(b.protocol)));
  return std::nullopt;
}

// The k-th send from a to b meets the k-th recv on b from a.
void matchMessages(const Plan& plan, Findings& f) {
  std::set<std::pair<int, int>> pairs;
  for (const auto& [key, v] : f.sends_) pairs.insert(key);
  for (const auto& [key, v] : f.recvs_) pairs.insert(key);
  static const std::vector<MessageRecord> kNone;
  for (const auto& [from, to] : pairs) {
    auto s = f.sends_.find({from, to});
    auto r = f.recvs_.find({from, to});
    const auto& sends = s == f.sends_.end() ? kNone : s->second;
    const auto& recvs = r == f.recvs_.end() ? kNone : r->second;
    const std::size_t common = std::min(sends.size(), recvs.size());
    bool reported = false;
    for (std::size_t k = 0; k < common; ++k) {
      const MessageRecord &a = sends[k], &b = recvs[k];
      const auto differ = mismatch(plan, a, b);
      if (!differ) continue;
      f.add(a.site.path(),
            fmt::format("rank {}'s send #{} to rank {} ({}) {} rank {}'s recv #{} from rank {} "
                        "({}) {}",
                        from, k + 1, to, a.site.str(), differ->first, to, k + 1, from,
                        b.site.str(), differ->second));
      reported = true;
      break;
    }
    if (reported || f.truncated_ || sends.size() == recvs.size()) continue;
    const bool more_sends = sends.size() > recvs.size();
    const MessageRecord& first = more_sends ? sends[common] : recvs[common];
    f.add(first.site.path(),
          fmt::format("rank {} sends {} to rank {}, rank {} receives {} from rank {}; the first "
                      "unmatched is the {} ({}) on rank {}",
                      from, plural(sends.size(), "message"), to, to, recvs.size(), from,
                      more_sends ? "send" : "recv", first.site.str(), more_sends ? from : to));
  }
}

std::string describe(const Plan& plan, const IpcEvent& e) {
  if (e.alloc < 0) return fmt::format("share_mem_handles ({})", e.site.str());
  return fmt::format("allocate '{}' {} ({})", plan.allocs[e.alloc].name, listInts(e.shape),
                     e.site.str());
}

// IPC peers map each other's memory: every rank allocates the ipc-shared
// buffers with the same shapes, and exchanges them at the same points, so
// that all ranks know which blocks an exchange covers (and the exchange,
// being collective, is reached by all).
void matchIpcEvents(const Plan& plan, Findings& f) {
  const std::vector<IpcEvent>& ref = f.ipc_events_[0];
  for (int r = 1; r < plan.world; ++r) {
    const std::vector<IpcEvent>& mine = f.ipc_events_[r];
    const std::size_t common = std::min(ref.size(), mine.size());
    std::size_t k = 0;
    while (k < common && ref[k].pc == mine[k].pc && ref[k].shape == mine[k].shape) ++k;
    if (k == common && (ref.size() == mine.size() || f.truncated_)) continue;
    if (k < common && ref[k].pc == mine[k].pc) {  // the same allocate, another shape
      const PlanAlloc& a = plan.allocs[ref[k].alloc];
      const std::string path = a.node >= 0 ? plan.nodes[a.node].path : std::string("/");
      f.add(path, fmt::format("'{}' is shared through ipc, so its shape must be the same on "
                              "every rank: rank 0 has {}, rank {} has {}",
                              a.name, listInts(ref[k].shape), r, listInts(mine[k].shape)));
      return;
    }
    const IpcEvent& first = k < ref.size() ? ref[k] : mine[k];
    auto what = [&](const std::vector<IpcEvent>& v) {
      return k < v.size() ? describe(plan, v[k]) : std::string("nothing more");
    };
    f.add(first.site.path(),
          fmt::format("share_mem_handles and the allocations of ipc-shared buffers must happen in "
                      "the same order on every rank (the exchange is collective): event #{} is "
                      "{} on rank 0 but {} on rank {}",
                      k + 1, what(ref), what(mine), r));
    return;
  }
}

// Every matched operation becomes a meeting of its participations in the
// wait-for graph; a cycle there is a deadlock (progress.h).
void findDeadlock(const Plan& plan, Findings& f) {
  using Meeting = WaitGraph::Meeting;
  WaitGraph& g = f.graph_;
  std::vector<int> parts;
  for (std::size_t t = 0; t < plan.teams.size(); ++t) {
    const auto& seqs = f.collectives_[t];
    if (seqs.empty()) continue;
    std::size_t common = seqs[0].size();
    for (const auto& seq : seqs) common = std::min(common, seq.size());
    for (std::size_t k = 0; k < common; ++k) {
      parts.clear();
      for (const auto& seq : seqs) parts.push_back(seq[k].part);
      g.meet(Meeting{Meeting::What::Collective, static_cast<int>(t), -1, -1,
                     static_cast<int64_t>(k), parts[0]},
             parts);
    }
  }
  for (const auto& [pair, sends] : f.sends_) {
    auto r = f.recvs_.find(pair);
    if (r == f.recvs_.end()) continue;
    for (std::size_t k = 0; k < std::min(sends.size(), r->second.size()); ++k) {
      if (sends[k].collective) continue;  // a collective's messages meet as the collective
      g.meet(Meeting{Meeting::What::Message, -1, pair.first, pair.second, static_cast<int64_t>(k),
                     sends[k].part},
             {sends[k].part, r->second[k].part});
    }
  }
  std::vector<std::vector<int>> shares(plan.world);
  for (int rank = 0; rank < plan.world; ++rank)
    for (const IpcEvent& e : f.ipc_events_[rank])
      if (e.alloc < 0) shares[rank].push_back(e.part);
  std::size_t common = shares[0].size();
  for (const auto& s : shares) common = std::min(common, s.size());
  for (std::size_t k = 0; k < common; ++k) {
    parts.clear();
    for (const auto& s : shares) parts.push_back(s[k]);
    g.meet(Meeting{Meeting::What::Share, -1, -1, -1, static_cast<int64_t>(k), parts[0]}, parts);
  }
  if (auto cycle = g.findCycle(plan)) f.add(cycle->first, cycle->second);
}

// The matched messages, for backends that need the peer's address.
P2pTrace buildTrace(const Plan& plan, const Findings& f) {
  P2pTrace trace;
  trace.truncated = f.truncated_;
  for (const auto& [pair, sends] : f.sends_) {
    auto r = f.recvs_.find(pair);
    if (r == f.recvs_.end()) continue;
    const std::vector<MessageRecord>& recvs = r->second;
    std::vector<P2pMessage>& out = trace.pairs[pair];
    for (std::size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
      const MessageRecord &a = sends[k], &b = recvs[k];
      if (!a.range || !b.range) break;  // reported; the rest would be off by one
      const std::size_t size = dtypeSize(a.dtype);
      P2pMessage m;
      m.send = {a.comm, a.range->alloc, static_cast<std::size_t>(a.range->offset) * size};
      m.recv = {b.comm, b.range->alloc,
                static_cast<std::size_t>(b.range->offset) * dtypeSize(b.dtype)};
      m.bytes = static_cast<std::size_t>(a.range->count) * size;
      m.protocol = a.protocol;
      m.backend = a.backend;
      out.push_back(m);
    }
  }
  return trace;
}

}  // namespace

ScheduleCheckResult checkSchedule(const Plan& plan, const ScheduleCheckOptions& options) {
  Findings findings = simulate(plan, options);
  matchCollectives(plan, findings);
  matchMessages(plan, findings);
  matchIpcEvents(plan, findings);
  // Mismatched sequences are reported already; a deadlock search over them
  // would only repeat them.
  if (findings.issues_.empty()) findDeadlock(plan, findings);
  if (!findings.issues_.empty()) throw ValidationError(std::move(findings.issues_));
  return {findings.truncated_, findings.steps_per_rank_, findings.posts_,
          options.want_trace ? buildTrace(plan, findings) : P2pTrace{},
          std::move(findings.notes_), std::move(findings.capture_blocker_)};
}

P2pTrace traceP2p(const Plan& plan, const ScheduleCheckOptions& options) {
  return buildTrace(plan, simulate(plan, options));
}

void checkPeerNodes(const Plan& plan, const P2pTrace& trace,
                    const std::vector<std::string>& nodes) {
  if (nodes.empty()) return;
  HIR_INTERNAL_ASSERT(static_cast<int>(nodes.size()) == plan.world,
                      "{} node names for a world of {}", nodes.size(), plan.world);
  std::vector<Issue> issues;
  std::set<int> reported;  // one issue per communication
  auto check = [&](int comm, int rank, int peer) {
    const PlanComm& c = plan.comms[comm];
    if (c.cross_node_why.empty() || nodes[rank] == nodes[peer] || !reported.insert(comm).second)
      return;
    issues.push_back(
        {plan.nodes[c.node].path,
         fmt::format("on rank {}: {} {} rank {} through backend '{}', but rank {} is on node '{}' "
                     "and rank {} on node '{}': {}",
                     rank, toString(c.type), c.type == CommType::Send ? "to" : "from", peer,
                     plan.backends[c.backend].name, peer, nodes[peer], rank, nodes[rank],
                     c.cross_node_why)});
  };
  for (const auto& [pair, messages] : trace.pairs)
    for (const P2pMessage& m : messages) {
      check(m.send.comm, pair.first, pair.second);
      check(m.recv.comm, pair.second, pair.first);
    }
  if (!issues.empty()) throw ValidationError(std::move(issues));
}

}  // namespace hir
