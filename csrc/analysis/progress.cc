// The wait-for graph and its cycle search (see progress.h).
#include "analysis/progress.h"

#include <algorithm>

#include "common/check.h"
#include "plan/step.h"

namespace hir::dry {

// ---------------------------------------------------------------- graph

int WaitGraph::add(Kind kind, int rank, int pc, int stream, const Site& site) {
  Node n{kind, rank, pc, stream, -1};
  if (!site.loop_values.empty()) {
    n.loops = static_cast<int64_t>(loop_values_.size());
    loop_values_.insert(loop_values_.end(), site.loop_values.begin(), site.loop_values.end());
  }
  nodes_.push_back(n);
  return static_cast<int>(nodes_.size()) - 1;
}

void WaitGraph::meet(Meeting m, const std::vector<int>& parts) {
  const int id = static_cast<int>(nodes_.size());
  nodes_.push_back(Node{Kind::Meeting});
  meeting_of_.resize(nodes_.size(), -1);
  meeting_info_.resize(nodes_.size(), -1);
  meeting_info_[id] = static_cast<int>(meetings_.size());
  meetings_.push_back(m);
  for (int p : parts) {
    edges_.push_back({p, id});
    meeting_of_[p] = id;
  }
}

std::string WaitGraph::siteOf(const Plan& plan, int id) const {
  const Node& n = nodes_[id];
  const int node = plan.code[n.pc].node;
  const std::size_t count = plan.nodes[node].loop_slots.size();
  std::vector<int64_t> values(count, 0);
  if (n.loops >= 0)
    std::copy_n(loop_values_.begin() + n.loops, count, values.begin());
  return Site{&plan, node, LoopValues(values)}.str();
}

std::string WaitGraph::describeMeeting(const Plan& plan, int id) const {
  const Meeting& m = meetings_[meeting_info_[id]];
  switch (m.what) {
    case Meeting::What::Collective: {
      const auto& post = std::get<instr::Post>(plan.code[nodes_[m.part].pc].op);
      const PlanComm& c = plan.comms[post.comm];
      return fmt::format("{} #{} of {} ('{}')", toString(c.type), m.index + 1,
                         teamName(plan.teams[m.team]), c.name);
    }
    case Meeting::What::Message: {
      const auto& post = std::get<instr::Post>(plan.code[nodes_[m.part].pc].op);
      return fmt::format("message #{} from rank {} to rank {} (send '{}')", m.index + 1, m.from,
                         m.to, plan.comms[post.comm].name);
    }
    case Meeting::What::Share:
      return fmt::format("share_mem_handles #{} of every rank", m.index + 1);
  }
  HIR_INTERNAL_ASSERT(false, "unknown meeting kind");
  return {};
}

std::string WaitGraph::describeNode(const Plan& plan, int id) const {
  const Node& n = nodes_[id];
  const std::string at = siteOf(plan, id);
  auto waitName = [&] {
    const auto& w = std::get<instr::Wait>(plan.code[n.pc].op);
    return w.comm >= 0 ? plan.comms[w.comm].name : plan.groups[w.group].name;
  };
  switch (n.kind) {
    case Kind::Part: {
      if (const auto* p = std::get_if<instr::Post>(&plan.code[n.pc].op)) {
        const PlanComm& c = plan.comms[p->comm];
        return fmt::format("rank {}'s {} '{}' ({})", n.rank, toString(c.type), c.name, at);
      }
      return fmt::format("rank {}'s share_mem_handles ({})", n.rank, at);
    }
    case Kind::GroupStart:
    case Kind::GroupDone:
      return fmt::format("rank {}'s group ({})", n.rank, at);
    case Kind::HostWait:
      if (std::holds_alternative<instr::Share>(plan.code[n.pc].op))
        return fmt::format("rank {}'s share_mem_handles ({}), which blocks the host,", n.rank, at);
      return fmt::format("rank {}'s host wait on '{}' ({})", n.rank, waitName(), at);
    case Kind::StreamWait:
      return fmt::format("rank {}'s wait on '{}' on stream {} ({})", n.rank, waitName(), n.stream,
                         at);
    case Kind::Sync:
      return fmt::format("rank {}'s sync_stream on stream {} ({})", n.rank, n.stream, at);
    case Kind::Meeting:
      return describeMeeting(plan, id);
  }
  HIR_INTERNAL_ASSERT(false, "unknown node kind");
  return {};
}

void WaitGraph::startOrder(int from, int to) {
  if (from < 0) return;
  edges_.push_back({from, to});
  if (start_pred_.size() <= static_cast<std::size_t>(to)) start_pred_.resize(to + 1, -1);
  start_pred_[to] = from;
}

bool WaitGraph::startsAfter(int b, int a) const {
  return static_cast<std::size_t>(b) < start_pred_.size() && start_pred_[b] == a;
}

std::string WaitGraph::backendOf(const Plan& plan, int id) const {
  const auto& op = plan.code[nodes_[id].pc].op;
  if (const auto* post = std::get_if<instr::Post>(&op))
    return plan.backends[plan.comms[post->comm].backend].name;
  if (const auto* begin = std::get_if<instr::GroupBegin>(&op))
    if (plan.groups[begin->group].backend >= 0)
      return plan.backends[plan.groups[begin->group].backend].name;
  return "the backend";
}

std::optional<std::pair<std::string, std::string>> WaitGraph::findCycle(const Plan& plan) const {
  const int n = static_cast<int>(nodes_.size());
  std::vector<std::pair<int, int>> all = edges_;
  for (const auto& [p, to] : completions_) {
    const int m = static_cast<std::size_t>(p) < meeting_of_.size() ? meeting_of_[p] : -1;
    if (m >= 0) all.push_back({m, to});  // an unmatched post (truncated run) waits for nothing
  }
  // Successor lists (CSR), in-degrees, then Kahn's algorithm.
  std::vector<int> start(n + 1, 0), succ(all.size()), indeg(n, 0);
  for (const auto& [a, b] : all) ++start[a + 1], ++indeg[b];
  for (int i = 0; i < n; ++i) start[i + 1] += start[i];
  {
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (const auto& [a, b] : all) succ[fill[a]++] = b;
  }
  std::vector<int> queue;
  queue.reserve(n);
  for (int i = 0; i < n; ++i)
    if (indeg[i] == 0) queue.push_back(i);
  for (std::size_t q = 0; q < queue.size(); ++q)
    for (int k = start[queue[q]]; k < start[queue[q] + 1]; ++k)
      if (--indeg[succ[k]] == 0) queue.push_back(succ[k]);
  if (static_cast<int>(queue.size()) == n) return std::nullopt;

  // Every node left has a predecessor left: walking back from one reaches a
  // cycle.
  std::vector<int> pred_start(n + 1, 0), pred(all.size());
  for (const auto& [a, b] : all) ++pred_start[b + 1];
  for (int i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
  {
    std::vector<int> fill(pred_start.begin(), pred_start.end() - 1);
    for (const auto& [a, b] : all) pred[fill[b]++] = a;
  }
  int v = 0;
  while (indeg[v] == 0) ++v;
  std::vector<int> seen_at(n, -1), walk;
  while (seen_at[v] < 0) {
    seen_at[v] = static_cast<int>(walk.size());
    walk.push_back(v);
    int next = -1;
    for (int k = pred_start[v]; k < pred_start[v + 1] && next < 0; ++k)
      if (indeg[pred[k]] > 0) next = pred[k];
    HIR_INTERNAL_ASSERT(next >= 0, "a node left by Kahn's algorithm without a predecessor left");
    v = next;
  }
  std::vector<int> cycle(walk.begin() + seen_at[v], walk.end());
  std::reverse(cycle.begin(), cycle.end());  // forward: each node waits for the one before
  auto first_meeting = std::find_if(cycle.begin(), cycle.end(),
                                    [&](int id) { return nodes_[id].kind == Kind::Meeting; });
  HIR_INTERNAL_ASSERT(first_meeting != cycle.end(), "a wait cycle within one rank");
  std::rotate(cycle.begin(), first_meeting, cycle.end());

  // One sentence per meeting: who waits for it, and what that holds back.
  std::string message = "deadlock: these waits form a cycle, so no rank can go on: ";
  std::string path;
  const std::size_t len = cycle.size();
  bool first = true;
  for (std::size_t i = 0; i < len; ++i) {
    if (nodes_[cycle[i]].kind != Kind::Meeting) continue;
    const int consumer = cycle[(i + 1) % len];
    std::size_t j = (i + 1) % len;
    while (nodes_[cycle[(j + 1) % len]].kind != Kind::Meeting) j = (j + 1) % len;
    const int part = cycle[j];
    if (path.empty()) path = plan.nodes[plan.code[nodes_[consumer].pc].node].path;
    if (!first) message += "; ";
    first = false;
    if (consumer == part) {
      message += fmt::format("{} starts only after {} completes ({} runs them in order)",
                             describeNode(plan, part), describeMeeting(plan, cycle[i]),
                             backendOf(plan, part));
    } else {
      message += fmt::format("{} waits for {}, and {} comes after it", describeNode(plan, consumer),
                             describeMeeting(plan, cycle[i]), describeNode(plan, part));
      // Where the chain goes from one start to the next (kStartsInPostOrder).
      for (std::size_t k = (i + 1) % len; k != j; k = (k + 1) % len) {
        const int a = cycle[k], b = cycle[(k + 1) % len];
        if (!startsAfter(b, a)) continue;
        message += fmt::format(" ({} starts a rank's posts one at a time, in the order they were "
                               "posted, so {} starts only after {} started)",
                               backendOf(plan, a), describeNode(plan, b), describeNode(plan, a));
        break;
      }
    }
  }
  return std::pair(path, message);
}

// ------------------------------------------------------------ one rank

RankGraph::RankGraph(WaitGraph& g, const Plan& plan, int rank)
    : g_(g),
      plan_(plan),
      rank_(rank),
      unit_done_(plan.comms.size() + plan.groups.size()),
      backend_tail_(plan.backends.size()),
      start_tail_(plan.backends.size(), -1) {
  stream_.fill(-1);
}

template <class F>
void RankGraph::forEachOrderSlot(int comm, int peer, F&& f) {
  const PlanComm& c = plan_.comms[comm];
  const PlanBackend& b = plan_.backends[c.backend];
  switch (b.post_order) {
    case PostOrder::kFree:
    case PostOrder::kStartsInPostOrder:  // an order of starts (startAfterEarlierPosts)
      return;
    case PostOrder::kPerPeer:
      if (isPointToPoint(c.type)) {
        if (peer >= 0) f(lane_tail_[{c.backend, peer * 2 + (c.type == CommType::Send ? 0 : 1)}]);
        return;
      }
      // A collective run as messages uses the lanes to and from every
      // other member of its team.
      if (b.collective_messages == nullptr) return;
      for (int r : plan_.teams[c.team].ranks)
        if (r != rank_)
          for (int direction : {0, 1}) f(lane_tail_[{c.backend, r * 2 + direction}]);
      return;
    case PostOrder::kPerRank:
      f(backend_tail_[c.backend]);
      return;
  }
}

void RankGraph::startAfterEarlierPosts(int backend, int node) {
  if (backend < 0 || plan_.backends[backend].post_order != PostOrder::kStartsInPostOrder) return;
  g_.startOrder(start_tail_[backend], node);
  start_tail_[backend] = node;
}

int RankGraph::post(int comm, int unit, int s, int pc, const Site& site, int peer) {
  const int part = g_.add(WaitGraph::Kind::Part, rank_, pc, s, site);
  auto follow = [&](Done& order) {
    g_.edge(order, part);
    order = Done{part, true};
  };
  if (group_start_ >= 0) {
    g_.edge(group_start_, part);
    // In a group, only the lanes order members (a per-rank order is the group's).
    if (plan_.backends[plan_.comms[comm].backend].post_order == PostOrder::kPerPeer)
      forEachOrderSlot(comm, peer, follow);
    group_parts_.push_back(part);
    return part;
  }
  g_.edge(host_, part);
  g_.edge(stream_[s], part);
  startAfterEarlierPosts(plan_.comms[comm].backend, part);
  forEachOrderSlot(comm, peer, follow);
  unit_done_[unit] = Done{part, true};
  return part;
}

void RankGraph::groupBegin(int group, int s, int pc, const Site& site) {
  group_ = group;
  group_start_ = g_.add(WaitGraph::Kind::GroupStart, rank_, pc, s, site);
  g_.edge(host_, group_start_);
  g_.edge(stream_[s], group_start_);
  const int backend = plan_.groups[group].backend;
  if (backend >= 0 && plan_.backends[backend].post_order == PostOrder::kPerRank)
    g_.edge(backend_tail_[backend], group_start_);
  startAfterEarlierPosts(backend, group_start_);
  group_parts_.clear();
}

void RankGraph::groupEnd(int group, int unit, int pc, const Site& site) {
  const int done = g_.add(WaitGraph::Kind::GroupDone, rank_, pc, 0, site);
  for (int p : group_parts_) g_.edge(Done{p, true}, done);
  unit_done_[unit] = Done{done, false};
  const int backend = plan_.groups[group].backend;
  if (backend >= 0 && plan_.backends[backend].post_order == PostOrder::kPerRank)
    backend_tail_[backend] = Done{done, false};
  group_start_ = -1;
  group_ = -1;
  group_parts_.clear();
}

void RankGraph::waitStream(int unit, int s, int pc, const Site& site) {
  if (unit_done_[unit].id < 0) return;
  const int w = g_.add(WaitGraph::Kind::StreamWait, rank_, pc, s, site);
  g_.edge(stream_[s], w);
  g_.edge(unit_done_[unit], w);
  stream_[s] = w;
}

void RankGraph::waitHost(int unit, int pc, const Site& site) {
  if (unit_done_[unit].id < 0) return;
  const int w = g_.add(WaitGraph::Kind::HostWait, rank_, pc, 0, site);
  g_.edge(host_, w);
  g_.edge(unit_done_[unit], w);
  host_ = w;
}

void RankGraph::sync(int to, int from, int pc, const Site& site) {
  if (to == from || stream_[from] < 0) return;
  const int w = g_.add(WaitGraph::Kind::Sync, rank_, pc, to, site);
  g_.edge(stream_[to], w);
  g_.edge(stream_[from], w);
  stream_[to] = w;
}

int RankGraph::share(int pc, const Site& site) {
  const int part = g_.add(WaitGraph::Kind::Part, rank_, pc, 0, site);
  g_.edge(host_, part);
  const int w = g_.add(WaitGraph::Kind::HostWait, rank_, pc, 0, site);
  g_.edge(host_, w);
  g_.edge(Done{part, true}, w);
  host_ = w;
  return part;
}

}  // namespace hir::dry
