// The cross-rank schedule check (see schedule_check.h). Each rank runs the
// plan dry: scalars are evaluated, allocations have shapes but no memory,
// communications are recorded instead of posted. Per-rank problems are found
// while running; the recorded collectives and send/recv are compared across
// ranks at the end.
//
// A problem found at one instruction is reported once, for the first rank
// and loop iteration that hits it (ranks run in order 0, 1, ...): the same
// mistake on every rank would otherwise fill the capped list.
#include "analysis/schedule_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/check.h"
#include <hostir/tensor_ref.h>

namespace hir {
namespace {

using Issue = ValidationError::Issue;

constexpr std::size_t kMaxIssues = 20;

// A contiguous span of an allocation, in elements.
struct Range {
  int alloc = -1;
  int64_t offset = 0;
  int64_t count = 0;
};

bool overlaps(const Range& a, const Range& b) {
  return a.alloc == b.alloc && a.count > 0 && b.count > 0 && a.offset < b.offset + b.count &&
         b.offset < a.offset + a.count;
}

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

struct CollectiveRecord {
  CommType type;
  std::optional<int64_t> count;  // input elements; unknown when the input did not resolve
  DType dtype;
  ReduceOp reduce;
  std::optional<int64_t> root;  // absolute rank
  Site site;
};

struct MessageRecord {  // one send or recv
  std::optional<int64_t> count;
  DType dtype = DType::Float32;
  Site site;
  int comm = -1;
  std::optional<Range> range;  // unknown when the tensor did not resolve
  int backend = -1;
  Protocol protocol = Protocol::Put;  // auto is put
};

// What must happen in the same order on every rank for ipc: share_mem_handles
// (collective) and allocations of ipc-shared buffers (their blocks are what
// is exchanged, so every rank must know when a peer's block changes).
struct IpcEvent {
  int pc = -1;
  int alloc = -1;  // -1: a share_mem_handles
  std::vector<int64_t> shape;
  Site site;
};

std::string describe(const CollectiveRecord& c) {
  std::string out = fmt::format("{} of ", toString(c.type));
  out += c.count ? fmt::format("{} {}", *c.count, toString(c.dtype))
                 : fmt::format("an unknown number of {}", toString(c.dtype));
  if (hasReduceOp(c.type)) out += fmt::format(" with {}", toString(c.reduce));
  if (hasRoot(c.type))
    out += c.root ? fmt::format(" from root {}", *c.root) : std::string(" from an unknown root");
  return out;
}

// Unknown counts and roots (already reported on their rank) match anything.
bool sameCollective(const CollectiveRecord& a, const CollectiveRecord& b) {
  if (a.type != b.type || a.dtype != b.dtype) return false;
  if (a.count && b.count && *a.count != *b.count) return false;
  if (hasReduceOp(a.type) && a.reduce != b.reduce) return false;
  if (hasRoot(a.type) && a.root && b.root && *a.root != *b.root) return false;
  return true;
}

std::string describe(const MessageRecord& m) {
  return m.count ? fmt::format("{} {}", *m.count, toString(m.dtype))
                 : fmt::format("an unknown number of {}", toString(m.dtype));
}

std::string listInts(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string teamName(const PlanTeam& team) {
  return "team " + listInts(std::vector<int64_t>(team.ranks.begin(), team.ranks.end()));
}

std::string plural(int64_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

// What all ranks recorded, and the issues so far.
class Findings {
 public:
  explicit Findings(const Plan& plan)
      : collectives_(plan.teams.size(), std::vector<std::vector<CollectiveRecord>>(plan.world)),
        ipc_events_(plan.world) {}

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

  std::vector<std::vector<std::vector<CollectiveRecord>>> collectives_;       // [team][rank]
  std::map<std::pair<int, int>, std::vector<MessageRecord>> sends_;           // (from, to)
  std::map<std::pair<int, int>, std::vector<MessageRecord>> recvs_;           // (from, to): on `to`
  std::vector<std::vector<IpcEvent>> ipc_events_;                            // [rank]
  std::vector<Issue> issues_;
  bool truncated_ = false;
  int64_t posts_ = 0;
  int64_t dropped_ = 0;

 private:
  std::set<std::pair<int, std::string>> reported_;
};

// A communication posted and not yet waited on, with what it reads and writes.
struct Pending {
  int comm = -1;
  int group = -1;       // plan group, or -1
  int group_post = -1;  // which post of a group (a counter), or -1
  std::vector<Range> reads, writes;
  Site site;
};

// Runs the plan for one rank.
class RankRun {
 public:
  RankRun(const Plan& plan, const ScheduleCheckOptions& options, Findings& findings, int rank)
      : plan_(plan),
        options_(options),
        findings_(findings),
        rank_(rank),
        scalars_(plan.scalar_init),
        shapes_(plan.allocs.size()),
        bad_alloc_(plan.allocs.size(), false),
        comm_seen_(plan.comms.size(), false),
        group_seen_(plan.groups.size(), false) {
    scalars_[kRankSlot] = rank;
  }

  void run() {
    int64_t steps = 0;
    const int size = static_cast<int>(plan_.code.size());
    while (pc_ >= 0 && pc_ < size && !stopped_) {
      if (steps >= options_.max_steps_per_rank) {
        findings_.truncated_ = true;
        return;
      }
      ++steps;
      const Instr& in = plan_.code[pc_];
      node_ = in.node;
      next_ = pc_ + 1;
      try {
        std::visit(*this, in.op);
      } catch (const ProgramError& e) {
        problem("evaluate", [&] { return std::string(e.what()); });
        // A jump that could not be decided leaves no sensible next step.
        if (isControl(in)) stopped_ = true;
      }
      pc_ = next_;
    }
  }

  // -------------------------------------------------------- control flow
  void operator()(const instr::LoopInit& l) {
    scalars_[l.slot] = l.start.eval(scalars_.data());
    scalars_[l.stop_slot] = l.stop.eval(scalars_.data());
    const int64_t step = l.step.eval(scalars_.data());
    scalars_[l.step_slot] = step;
    if (step <= 0) {
      problem("step", [&] {
        return fmt::format("loop step {} evaluates to {}; a loop step must be positive",
                           l.step.text(), step);
      });
      stopped_ = true;  // the loop would never end
      return;
    }
    if (!(scalars_[l.slot] < scalars_[l.stop_slot])) next_ = l.exit;
  }
  void operator()(const instr::LoopNext& l) {
    scalars_[l.slot] += scalars_[l.step_slot];
    if (scalars_[l.slot] < scalars_[l.stop_slot]) next_ = l.body;
  }
  void operator()(const instr::JumpIfZero& j) {
    if (j.cond.eval(scalars_.data()) == 0) next_ = j.target;
  }
  void operator()(const instr::Jump& j) { next_ = j.target; }

  // --------------------------------------------------------- allocations
  void operator()(const instr::Allocate& a) {
    const PlanAlloc& alloc = plan_.allocs[a.alloc];
    std::vector<int64_t> shape;
    for (std::size_t d = 0; d < alloc.shape.size(); ++d) {
      int64_t extent = alloc.shape[d].eval(scalars_.data());
      if (extent < 0) {
        problem("shape", [&] {
          return fmt::format("'{}' has extent {} ({}) in dimension {}; extents are >= 0",
                             alloc.name, extent, alloc.shape[d].text(), d);
        });
        bad_alloc_[a.alloc] = true;  // later uses would only repeat this
        return;
      }
      shape.push_back(extent);
    }
    if (shapes_[a.alloc])
      problem("realloc", [&] {
        return fmt::format("allocates '{}' again while it is still allocated; deallocate it first",
                           alloc.name);
      });
    if (alloc.ipc_shared) findings_.ipc_events_[rank_].push_back({pc_, a.alloc, shape, site()});
    shapes_[a.alloc] = std::move(shape);
    bad_alloc_[a.alloc] = false;
  }

  void operator()(const instr::Deallocate& d) {
    const std::string& name = plan_.allocs[d.alloc].name;
    if (!shapes_[d.alloc]) {
      if (!bad_alloc_[d.alloc])
        problem("dealloc", [&] {
          return fmt::format("deallocates '{}', which is not allocated on this rank now", name);
        });
      return;
    }
    Range whole{d.alloc, 0, elementCount(*shapes_[d.alloc])};
    if (const Pending* p = findConflict(whole, /*against_reads=*/false))
      problem("hazard:" + std::to_string(p->comm), [&] {
        return fmt::format(
            "deallocates '{}' while communication '{}' ({}) that writes it is "
            "still pending; wait on '{}' first",
            name, commName(*p), p->site.str(), commName(*p));
      });
    // The memory is gone: pending ranges on it can no longer conflict.
    for (Pending& p : pending_) {
      auto gone = [&](const Range& r) { return r.alloc == d.alloc; };
      std::erase_if(p.reads, gone);
      std::erase_if(p.writes, gone);
    }
    shapes_[d.alloc].reset();
  }

  // ------------------------------------------------------ communications
  void operator()(const instr::Post& p) {
    const PlanComm& c = plan_.comms[p.comm];
    comm_seen_[p.comm] = true;
    const PlanTeam& team = plan_.teams[c.team];
    const bool p2p = isPointToPoint(c.type);
    if (!p2p && teamRankOf(team, rank_) < 0) return;  // not a member: skips the node
    ++findings_.posts_;

    std::optional<Range> in = c.input ? resolve(*c.input) : std::nullopt;
    std::optional<Range> out = c.output ? resolve(*c.output) : std::nullopt;
    const PlanRef& any_ref = c.input ? *c.input : *c.output;
    const DType dtype = plan_.allocs[any_ref.alloc].dtype;
    if (c.input && c.output && plan_.allocs[c.output->alloc].dtype != dtype)
      problem("dtype", [&] {
        return fmt::format("{} from {} '{}' to {} '{}': both need the same dtype", toString(c.type),
                           toString(dtype), c.input->text,
                           toString(plan_.allocs[c.output->alloc].dtype), c.output->text);
      });

    if (p2p) {
      postMessage(p.comm, c, in ? in : out, dtype);
    } else {
      checkSizes(c, team, in, out);
      CollectiveRecord rec{c.type,       in ? std::optional<int64_t>(in->count) : std::nullopt,
                           dtype,        c.reduce,
                           std::nullopt, site()};
      if (hasRoot(c.type)) rec.root = evalRoot(c, team);
      findings_.collectives_[c.team][rank_].push_back(std::move(rec));
    }

    // Hazards against what is already pending, then this post is pending.
    if (in) checkRead(*in, c.input->text);
    if (out) checkWrite(*out, c.output->text);
    Pending pend;
    pend.comm = p.comm;
    pend.group = c.group;
    pend.group_post = c.group >= 0 ? group_post_ : -1;
    if (in) pend.reads.push_back(*in);
    if (out) pend.writes.push_back(*out);
    pend.site = site();
    pending_.push_back(std::move(pend));
  }

  void operator()(const instr::GroupBegin& g) {
    group_seen_[g.group] = true;
    group_post_ = next_group_post_++;
  }
  void operator()(const instr::GroupEnd&) { group_post_ = -1; }

  void operator()(const instr::Wait& w) {
    if (w.comm >= 0) {
      if (!comm_seen_[w.comm]) {
        problem("wait", [&] {
          return fmt::format("waits on '{}', which this rank has not posted yet",
                             plan_.comms[w.comm].name);
        });
        return;
      }
      // A communication posted in a group completes with its group post.
      std::set<int> posts;
      for (const Pending& p : pending_)
        if (p.comm == w.comm && p.group_post >= 0) posts.insert(p.group_post);
      std::erase_if(pending_, [&](const Pending& p) {
        return p.comm == w.comm || (p.group_post >= 0 && posts.count(p.group_post));
      });
      return;
    }
    HIR_INTERNAL_ASSERT(w.group >= 0, "wait on neither a communication nor a group");
    if (!group_seen_[w.group]) {
      problem("wait", [&] {
        return fmt::format("waits on group '{}', which this rank has not posted yet",
                           plan_.groups[w.group].name);
      });
      return;
    }
    std::erase_if(pending_, [&](const Pending& p) { return p.group == w.group; });
  }

  // No data moves, but the exchange is collective.
  void operator()(const instr::Share&) {
    findings_.ipc_events_[rank_].push_back({pc_, -1, {}, site()});
  }

  // -------------------------------------------------------------- streams
  void operator()(const instr::SetStream& s) { checkStream(s.stream); }
  void operator()(const instr::SyncStream& s) { checkStream(s.stream); }

  // ----------------------------------------------------------------- data
  void operator()(const instr::Fill& f) {
    if (auto r = resolve(f.ref)) checkWrite(*r, f.ref.text);
  }
  void operator()(const instr::Check& c) {
    if (auto r = resolve(c.ref)) checkRead(*r, c.ref.text);
  }
  void operator()(const instr::Copy& c) {
    std::optional<Range> src = resolve(c.src), dst = resolve(c.dst);
    const DType from = plan_.allocs[c.src.alloc].dtype, to = plan_.allocs[c.dst.alloc].dtype;
    if (from != to)
      problem("dtype", [&] {
        return fmt::format("copy from {} '{}' to {} '{}': both need the same dtype", toString(from),
                           c.src.text, toString(to), c.dst.text);
      });
    if (src && dst && src->count != dst->count)
      problem("size", [&] {
        return fmt::format(
            "copies {} elements of '{}' into {} elements of '{}'; a copy needs equal sizes",
            src->count, c.src.text, dst->count, c.dst.text);
      });
    if (src) checkRead(*src, c.src.text);
    if (dst) checkWrite(*dst, c.dst.text);
  }

 private:
  static bool isControl(const Instr& in) {
    return std::holds_alternative<instr::LoopInit>(in.op) ||
           std::holds_alternative<instr::LoopNext>(in.op) ||
           std::holds_alternative<instr::JumpIfZero>(in.op) ||
           std::holds_alternative<instr::Jump>(in.op);
  }

  static int64_t elementCount(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }

  static int teamRankOf(const PlanTeam& team, int64_t rank) {
    auto it = std::find(team.ranks.begin(), team.ranks.end(), rank);
    return it == team.ranks.end() ? -1 : static_cast<int>(it - team.ranks.begin());
  }

  Site site() const {
    Site out{&plan_, node_, {}};
    for (int slot : plan_.nodes[node_].loop_slots) out.loop_values.push_back(scalars_[slot]);
    return out;
  }

  // Reports a problem at the current instruction, once per `kind` (see the
  // top of the file); `make_message` runs only if the problem is reported.
  template <class MakeMessage>
  void problem(const std::string& kind, MakeMessage&& make_message) {
    if (!findings_.firstAt(pc_, kind)) return;
    std::string loops = site().loops();
    std::string who = loops.empty() ? fmt::format("on rank {}", rank_)
                                    : fmt::format("on rank {} ({})", rank_, loops);
    findings_.add(plan_.nodes[node_].path, fmt::format("{}: {}", who, make_message()));
  }

  const std::string& commName(const Pending& p) const { return plan_.comms[p.comm].name; }

  std::optional<Range> resolve(const PlanRef& ref) {
    if (bad_alloc_[ref.alloc]) return std::nullopt;
    const auto& shape = shapes_[ref.alloc];
    if (!shape) {
      problem("unallocated:" + ref.text, [&] {
        return fmt::format("'{}' refers to '{}', which is not allocated on this rank now", ref.text,
                           plan_.allocs[ref.alloc].name);
      });
      return std::nullopt;
    }
    std::vector<int64_t> select;
    for (const CompiledExpr& e : ref.select) select.push_back(e.eval(scalars_.data()));
    std::optional<std::pair<int64_t, int64_t>> range;
    if (ref.has_range)
      range.emplace(ref.range_begin.eval(scalars_.data()), ref.range_end.eval(scalars_.data()));
    try {
      RefSpan span = resolveRef(ref.text, *shape, select, range);
      return Range{ref.alloc, span.offset, span.count};
    } catch (const ProgramError& e) {
      problem("ref:" + ref.text, [&] { return std::string(e.what()); });
      return std::nullopt;
    }
  }

  // ------------------------------------------------------------- hazards
  // The first pending communication whose writes (and reads, if
  // `against_reads`) overlap `r`.
  const Pending* findConflict(const Range& r, bool against_reads) const {
    for (const Pending& p : pending_) {
      for (const Range& w : p.writes)
        if (overlaps(r, w)) return &p;
      if (against_reads)
        for (const Range& rd : p.reads)
          if (overlaps(r, rd)) return &p;
    }
    return nullptr;
  }

  std::string spanText(const Range& r, const std::string& text) const {
    return fmt::format("'{}' (elements [{}, {}) of '{}')", text, r.offset, r.offset + r.count,
                       plan_.allocs[r.alloc].name);
  }

  void checkRead(const Range& r, const std::string& text) {
    if (const Pending* p = findConflict(r, /*against_reads=*/false))
      problem("hazard:" + std::to_string(p->comm), [&] {
        return fmt::format(
            "reads {} while communication '{}' ({}) that writes it is still "
            "pending; wait on '{}' first",
            spanText(r, text), commName(*p), p->site.str(), commName(*p));
      });
  }

  void checkWrite(const Range& r, const std::string& text) {
    const Pending* p = findConflict(r, /*against_reads=*/true);
    if (!p) return;
    const bool writes = std::any_of(p->writes.begin(), p->writes.end(),
                                    [&](const Range& w) { return overlaps(r, w); });
    problem("hazard:" + std::to_string(p->comm), [&] {
      return fmt::format(
          "writes {} while communication '{}' ({}) that {} it is still pending; wait on '{}' first",
          spanText(r, text), commName(*p), p->site.str(), writes ? "writes" : "reads",
          commName(*p));
    });
  }

  // ------------------------------------------------------ communications
  void postMessage(int slot, const PlanComm& c, const std::optional<Range>& tensor, DType dtype) {
    HIR_INTERNAL_ASSERT(c.peer.has_value(), "send/recv '{}' without a peer", c.name);
    const int64_t peer = c.peer->eval(scalars_.data());
    if (peer < 0 || peer >= plan_.world) {
      problem("peer", [&] {
        return fmt::format("peer {} evaluates to {}, outside the world [0, {})", c.peer->text(),
                           peer, plan_.world);
      });
      return;
    }
    checkPeerNode(c, static_cast<int>(peer));
    MessageRecord rec;
    rec.count = tensor ? std::optional<int64_t>(tensor->count) : std::nullopt;
    rec.dtype = dtype;
    rec.site = site();
    rec.comm = slot;
    rec.range = tensor;
    rec.backend = c.backend;
    rec.protocol = c.protocol == Protocol::Auto ? Protocol::Put : c.protocol;
    if (c.type == CommType::Send)
      findings_.sends_[{rank_, static_cast<int>(peer)}].push_back(std::move(rec));
    else
      findings_.recvs_[{static_cast<int>(peer), rank_}].push_back(std::move(rec));
  }

  // A backend that maps the peer's memory (ipc) reaches only its own node.
  void checkPeerNode(const PlanComm& c, int peer) {
    const std::vector<std::string>& nodes = options_.nodes;
    if (c.cross_node_why.empty() || nodes.empty()) return;
    HIR_INTERNAL_ASSERT(static_cast<int>(nodes.size()) == plan_.world,
                        "{} node names for a world of {}", nodes.size(), plan_.world);
    if (nodes[rank_] == nodes[peer]) return;
    problem("node", [&] {
      return fmt::format("{} {} rank {} through backend '{}', but rank {} is on node '{}' and rank "
                         "{} on node '{}': {}",
                         toString(c.type), c.type == CommType::Send ? "to" : "from", peer,
                         plan_.backends[c.backend], peer, nodes[peer], rank_, nodes[rank_],
                         c.cross_node_why);
    });
  }

  std::optional<int64_t> evalRoot(const PlanComm& c, const PlanTeam& team) {
    HIR_INTERNAL_ASSERT(c.root.has_value(), "{} '{}' without a root", toString(c.type), c.name);
    const int64_t root = c.root->eval(scalars_.data());
    if (teamRankOf(team, root) < 0) {
      problem("root", [&] {
        return fmt::format("root {} evaluates to {}, which is not a member of {}", c.root->text(),
                           root, teamName(team));
      });
      return std::nullopt;
    }
    return root;
  }

  // Element counts each collective type needs, for team size T.
  void checkSizes(const PlanComm& c, const PlanTeam& team, const std::optional<Range>& in,
                  const std::optional<Range>& out) {
    if (!in || !out) return;
    const int64_t T = static_cast<int64_t>(team.ranks.size());
    const int64_t i = in->count, o = out->count;
    std::string need;
    switch (c.type) {
      case CommType::Allgather:
      case CommType::Gather:
        if (o != T * i)
          need = fmt::format("the output needs team size {} x input {} = {} elements", T, i, T * i);
        break;
      case CommType::ReduceScatter:
      case CommType::Scatter:
        if (i != T * o)
          need = fmt::format("the input needs team size {} x output {} = {} elements", T, o, T * o);
        break;
      case CommType::Allreduce:
      case CommType::Broadcast:
      case CommType::Reduce:
        if (i != o) need = "input and output need the same number of elements";
        break;
      case CommType::Alltoall:
        if (i != o)
          need = "input and output need the same number of elements";
        else if (i % T != 0)
          need = fmt::format("the input needs a multiple of team size {} elements", T);
        break;
      case CommType::Send:
      case CommType::Recv:
        break;
    }
    if (!need.empty())
      problem("size", [&] {
        return fmt::format(
            "{} '{}' has input '{}' of {} elements and output '{}' of {} elements; {}",
            toString(c.type), c.name, c.input->text, i, c.output->text, o, need);
      });
  }

  void checkStream(const CompiledExpr& e) {
    const int64_t k = e.eval(scalars_.data());
    if (k < 0 || k >= kMaxStreams)
      problem("stream", [&] {
        return fmt::format("stream {} evaluates to {}, outside [0, {})", e.text(), k, kMaxStreams);
      });
  }

  const Plan& plan_;
  const ScheduleCheckOptions& options_;
  Findings& findings_;
  const int rank_;
  std::vector<int64_t> scalars_;
  std::vector<std::optional<std::vector<int64_t>>> shapes_;  // per alloc, while allocated
  std::vector<bool> bad_alloc_;                              // allocate failed: uses stay quiet
  std::vector<bool> comm_seen_, group_seen_;                 // posted (or skipped) so far
  std::vector<Pending> pending_;
  int group_post_ = -1, next_group_post_ = 0;
  int pc_ = 0, next_ = 0, node_ = 0;
  bool stopped_ = false;
};

// ------------------------------------------------------------ across ranks
// Every member of a team posts the same collectives in the same order.
void matchCollectives(const Plan& plan, Findings& f) {
  for (std::size_t t = 0; t < plan.teams.size(); ++t) {
    const PlanTeam& team = plan.teams[t];
    if (team.ranks.empty()) continue;
    const auto& seqs = f.collectives_[t];
    const int ref = team.ranks[0];
    std::size_t common = seqs[ref].size();
    for (int r : team.ranks) common = std::min(common, seqs[r].size());

    bool reported = false;
    for (std::size_t k = 0; k < common && !reported; ++k) {
      for (int r : team.ranks) {
        const CollectiveRecord &a = seqs[ref][k], &b = seqs[r][k];
        if (sameCollective(a, b)) continue;
        f.add(a.site.path(),
              fmt::format("{}: collective #{} differs: rank {} posts {} ({}) but rank {} posts {} "
                          "({})",
                          teamName(team), k + 1, ref, describe(a), a.site.str(), r, describe(b),
                          b.site.str()));
        reported = true;
        break;
      }
    }
    // A truncated rank ran only a prefix: counts cannot be compared.
    if (reported || f.truncated_) continue;
    auto [lo, hi] = std::minmax_element(team.ranks.begin(), team.ranks.end(), [&](int a, int b) {
      return seqs[a].size() < seqs[b].size();
    });
    if (seqs[*lo].size() == seqs[*hi].size()) continue;
    const CollectiveRecord& first = seqs[*hi][seqs[*lo].size()];
    f.add(first.site.path(),
          fmt::format("rank {} posts {} on {}, rank {} posts {}; the first unmatched is {} on "
                      "rank {} ({})",
                      *lo, plural(seqs[*lo].size(), "collective"), teamName(team), *hi,
                      seqs[*hi].size(), describe(first), *hi, first.site.str()));
  }
}

// How the send and the recv of a message disagree, as the two halves of a
// sentence ("rank 0's send ... <first> rank 1's recv ... <second>"), or
// nothing when they agree.
std::optional<std::pair<std::string, std::string>> mismatch(const Plan& plan,
                                                            const MessageRecord& a,
                                                            const MessageRecord& b) {
  if (a.dtype != b.dtype || (a.count && b.count && *a.count != *b.count))
    return std::pair(fmt::format("carries {} but", describe(a)),
                     fmt::format("expects {}", describe(b)));
  if (a.backend != b.backend)
    return std::pair(fmt::format("uses backend '{}' but", plan.backends[a.backend]),
                     fmt::format("uses backend '{}'; a send and its recv need the same backend",
                                 plan.backends[b.backend]));
  if (a.protocol != b.protocol)
    return std::pair(fmt::format("uses protocol '{}' but", toString(a.protocol)),
                     fmt::format("uses protocol '{}'; a send and its recv need the same protocol "
                                 "(auto is put)",
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

Findings simulate(const Plan& plan, const ScheduleCheckOptions& options) {
  HIR_INTERNAL_ASSERT(plan.world >= 1, "plan for world {}", plan.world);
  HIR_INTERNAL_ASSERT(!plan.teams.empty(), "plan without the world team");
  HIR_INTERNAL_ASSERT(options.nodes.empty() || static_cast<int>(options.nodes.size()) == plan.world,
                      "{} node names for a world of {}", options.nodes.size(), plan.world);
  Findings findings(plan);
  for (int rank = 0; rank < plan.world; ++rank) RankRun(plan, options, findings, rank).run();
  return findings;
}

}  // namespace

ScheduleCheckResult checkSchedule(const Plan& plan, const ScheduleCheckOptions& options) {
  Findings findings = simulate(plan, options);
  matchCollectives(plan, findings);
  matchMessages(plan, findings);
  matchIpcEvents(plan, findings);
  if (!findings.issues_.empty()) throw ValidationError(std::move(findings.issues_));
  return {findings.truncated_, findings.posts_, buildTrace(plan, findings)};
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
                     plan.backends[c.backend], peer, nodes[peer], rank, nodes[rank],
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
