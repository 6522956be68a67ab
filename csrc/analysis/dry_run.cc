// The dry run of each rank (see dry_run.h). Control flow, shapes,
// references, element counts, peers, roots and streams come from the
// plan-stepping core (plan/step.h), the same code the evaluator runs; what
// each instruction reads and writes comes from its accesses(). This file
// adds only what a dry run records and what it reports.
#include "analysis/dry_run.h"

#include <algorithm>
#include <array>

#include "analysis/hazards.h"
#include "plan/step.h"

namespace hir::dry {

bool overlaps(const Range& a, const Range& b) {
  return a.alloc == b.alloc && a.count > 0 && b.count > 0 && a.offset < b.offset + b.count &&
         b.offset < a.offset + a.count;
}

std::string listInts(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

namespace {

// What an instruction is called in messages ("the fill at /body/2",
// "communication 'ar'"): its name, and the name of what it posts or calls.
std::string opName(const Plan& plan, const Instr& in) {
  if (const auto* p = std::get_if<instr::Post>(&in.op))
    return fmt::format("{} '{}'", instrName(in), plan.comms[p->comm].name);
  if (const auto* k = std::get_if<instr::Kernel>(&in.op))
    return fmt::format("{} '{}'", instrName(in), plan.kernels[k->kernel]);
  return std::string(instrName(in));
}

// Runs the plan for one rank.
class RankRun {
 public:
  RankRun(const Plan& plan, const ScheduleCheckOptions& options, Findings& findings, int rank)
      : plan_(plan),
        options_(options),
        findings_(findings),
        rank_(rank),
        scalars_(plan.scalar_init),
        layouts_(plan.allocs.size()),
        alloc_bytes_(plan.allocs.size()),
        bad_alloc_(plan.allocs.size(), false),
        threw_(plan.code.size(), false),
        comm_seen_(plan.comms.size(), false),
        group_seen_(plan.groups.size(), false),
        ord_(static_cast<int>(plan.comms.size() + plan.groups.size())),
        pending_node_(plan.comms.size() + plan.groups.size(), -1),
        shadow_(static_cast<int>(plan.allocs.size())),
        graph_(findings.graph_, plan, rank) {
    scalars_[kRankSlot] = rank;
  }

  void run() {
    int64_t steps = 0;
    const int size = static_cast<int>(plan_.code.size());
    while (pc_ >= 0 && pc_ < size && !stopped_) {
      if (steps >= findings_.steps_per_rank_) {
        findings_.truncated_ = true;
        return;
      }
      ++steps;
      const Instr& in = plan_.code[pc_];
      node_ = in.node;
      try {
        resolveAccesses(in);
        pc_ = step(plan_, pc_, scalars_.data(), *this);
      } catch (const ProgramError& e) {
        problem("evaluate", [&] { return std::string(e.what()); });
        // A jump that could not be decided leaves no sensible next step.
        if (isControl(in)) stopped_ = true;
        ++pc_;
      }
    }
    if (!stopped_) notePendingAtEnd();
  }

  // --------------------------------------------------------- allocations
  void operator()(const instr::Allocate& a, int pc) {
    const PlanAlloc& alloc = plan_.allocs[a.alloc];
    Layout layout;
    try {
      evalLayout(alloc, scalars_.data(), layout);
    } catch (const ProgramError& e) {
      problem("shape", [&] { return std::string(e.what()); });
      bad_alloc_[a.alloc] = true;  // later uses would only repeat this
      return;
    }
    if (alloc_bytes_[a.alloc] && *alloc_bytes_[a.alloc] != layout.bytes)
      captureBlocker([&] {
        return fmt::format("allocates '{}' with {} bytes after {} bytes earlier in the run: the "
                           "block is replaced on the host, which a graph replay cannot do",
                           alloc.name, layout.bytes, *alloc_bytes_[a.alloc]);
      });
    alloc_bytes_[a.alloc] = layout.bytes;
    if (layouts_[a.alloc])
      problem("realloc", [&] {
        return fmt::format("allocates '{}' again while it is still allocated; deallocate it first",
                           alloc.name);
      });
    if (alloc.peer_mapped)
      findings_.ipc_events_[rank_].push_back({pc, a.alloc, layout.shape, site()});
    layouts_[a.alloc] = std::move(layout);
    bad_alloc_[a.alloc] = false;
    shadow_.clear(a.alloc);  // new memory: nothing touched it yet
  }

  void operator()(const instr::Deallocate& d, int) {
    const std::string& name = plan_.allocs[d.alloc].name;
    if (!layouts_[d.alloc]) {
      if (!bad_alloc_[d.alloc])
        problem("dealloc", [&] {
          return fmt::format("deallocates '{}', which is not allocated on this rank now", name);
        });
      return;
    }
    // The memory of an input is kept until its readers are done; an output
    // still being written is lost.
    if (std::optional<Conflict> c = shadow_.pendingPostWriter(d.alloc, stream_, ord_))
      problem("hazard:" + priorKey(c->prior), [&] {
        return fmt::format("deallocates '{}' while {} that writes it {}", name,
                           priorText(c->prior), pendingText(c->prior));
      });
    shadow_.clear(d.alloc);
    layouts_[d.alloc].reset();
  }

  // ------------------------------------------------------ communications
  void operator()(const instr::Post& p, int pc) {
    const PlanComm& c = plan_.comms[p.comm];
    comm_seen_[p.comm] = true;
    if (skips(p)) return;
    ++findings_.posts_;
    notCapturableBackend(c.backend, c.type);
    // A group's communications are one post of the group, made at its begin.
    if (c.group < 0) {
      ord_.post(unitOf(p.comm), stream_);
      pending_node_[p.comm] = node_;
    }
    int peer = -1;
    if (isPointToPoint(c.type) &&
        !attempt("peer", [&] { peer = peerRank(c, plan_.world, scalars_.data()); }))
      peer = -2;  // reported; no record
    Site here = site();
    const int part = graph_.post(p.comm, unitOf(p.comm), stream_, pc, here, peer < 0 ? -1 : peer);
    const PlanTeam& team = plan_.teams[c.team];
    // The accesses, in the order Post declares them: input, then output.
    const std::optional<Range> in = c.input ? accessed_[0] : std::nullopt;
    const std::optional<Range> out = c.output ? accessed_[c.input ? 1 : 0] : std::nullopt;
    const DType dtype = plan_.allocs[c.anyRef().alloc].dtype;
    if (c.input && c.output && plan_.allocs[c.output->alloc].dtype != dtype)
      problem("dtype", [&] {
        return fmt::format("{} from {} '{}' to {} '{}': both need the same dtype", toString(c.type),
                           toString(dtype), c.input->text,
                           toString(plan_.allocs[c.output->alloc].dtype), c.output->text);
      });

    if (isPointToPoint(c.type)) {
      if (peer >= 0) postMessage(p.comm, c, in ? in : out, dtype, peer, part, std::move(here));
    } else {
      int64_t chunk = -1;
      if (in && out)
        attempt("size", [&] { chunk = chunkCount(c, team.ranks.size(), in->count, out->count); });
      CollectiveRecord rec{c.type,       in ? std::optional<int64_t>(in->count) : std::nullopt,
                           dtype,        c.reduce,
                           std::nullopt, here, part, {}};
      int root = 0;
      bool root_ok = true;
      if (hasRoot(c.type))
        root_ok = attempt("root", [&] {
          root = rootTeamRank(c, team, scalars_.data());
          rec.root = team.ranks[root];
        });
      if (plan_.backends[c.backend].collective_messages != nullptr && chunk >= 0 && root_ok)
        rec.algorithm = postCollectiveMessages(p.comm, c, *in, *out, dtype, chunk, root, here);
      findings_.collectives_[c.team][teamRankOf(team, rank_)].push_back(std::move(rec));
    }
  }

  void operator()(const instr::GroupBegin& g, int pc) {
    group_seen_[g.group] = true;
    // A group that holds no communication posts nothing (no backend).
    if (const int b = plan_.groups[g.group].backend; b >= 0) notCapturableBackend(b, std::nullopt);
    ord_.post(groupUnit(g.group), stream_);
    pending_node_[groupUnit(g.group)] = node_;
    graph_.groupBegin(g.group, stream_, pc, site());
  }
  void operator()(const instr::GroupEnd& g, int pc) {
    graph_.groupEnd(g.group, groupUnit(g.group), pc, site());
  }

  void operator()(const instr::Wait& w, int pc) {
    if (w.comm >= 0) {
      if (!comm_seen_[w.comm]) {
        problem("wait", [&] {
          return fmt::format("waits on '{}', which this rank has not posted yet",
                             plan_.comms[w.comm].name);
        });
        return;
      }
    } else {
      HIR_INTERNAL_ASSERT(w.group >= 0, "wait on neither a communication nor a group");
      if (!group_seen_[w.group]) {
        problem("wait", [&] {
          return fmt::format("waits on group '{}', which this rank has not posted yet",
                             plan_.groups[w.group].name);
        });
        return;
      }
    }
    // A communication posted in a group completes with its group post.
    const int unit = w.comm >= 0 ? unitOf(w.comm) : groupUnit(w.group);
    pending_node_[unit] = -1;
    if (w.mode == WaitMode::Host) {
      captureBlocker([&] {
        return fmt::format("waits on {} in host mode: the host blocks in the middle of the run, "
                           "which a graph replay cannot do (a stream-mode wait can be captured)",
                           w.comm >= 0 ? fmt::format("'{}'", plan_.comms[w.comm].name)
                                       : fmt::format("group '{}'", plan_.groups[w.group].name));
      });
      ord_.waitHost(unit);
      graph_.waitHost(unit, pc, site());
    } else {
      ord_.waitStream(unit, stream_);
      graph_.waitStream(unit, stream_, pc, site());
    }
  }

  // No data moves, but the exchange is collective; it exchanges the
  // memory of the communications it lists that map peer memory, which must
  // be allocated by then (the run would fail on every rank).
  void operator()(const instr::Share& s, int pc) {
    if (s.written) checkShared(s);
    Site here = site();
    const int part = graph_.share(pc, here);
    findings_.ipc_events_[rank_].push_back({pc, -1, {}, std::move(here), part});
  }

  // A written share_mem_handles's buffers are allocated when it runs.
  void checkShared(const instr::Share& s) {
    for (int c : s.comms) {
      const PlanComm& comm = plan_.comms[c];
      if (!plan_.backends[comm.backend].maps_peer_memory) continue;
      for (const std::optional<PlanRef>* ref : {&comm.input, &comm.output}) {
        if (!*ref || layouts_[(*ref)->alloc] || bad_alloc_[(*ref)->alloc]) continue;
        problem("share", [&] {
          return fmt::format("share_mem_handles exchanges the memory of '{}', but its buffer "
                             "'{}' is not allocated here: place the share_mem_handles after "
                             "the allocate of '{}'",
                             comm.name, plan_.allocs[(*ref)->alloc].name,
                             plan_.allocs[(*ref)->alloc].name);
        });
      }
    }
  }

  // -------------------------------------------------------------- streams
  void operator()(const instr::SetStream& s, int) {
    attempt("stream", [&] { stream_ = streamIndex(s.stream, scalars_.data()); });
  }
  void operator()(const instr::SyncStream& s, int pc) {
    attempt("stream", [&] {
      const int from = streamIndex(s.stream, scalars_.data());
      ord_.syncStream(stream_, from);
      graph_.sync(stream_, from, pc, site());
    });
  }

  // ----------------------------------------------------------------- data
  // Their accesses were resolved and checked for hazards before they ran;
  // the patterns are evaluated as the run evaluates them (a division by zero
  // or a shift past 63 in them is found here, not on every rank at run time).
  void operator()(const instr::Fill& f, int) {
    if (!f.random) return evaluate(f.value, f.step);
    const DType t = plan_.allocs[f.ref.alloc].dtype;
    attempt("evaluate", [&] { randomPattern(*f.random, t, scalars_.data()); });
  }
  void operator()(const instr::Check& c, int) {
    attempt("evaluate", [&] { checkTolerance(c, scalars_.data()); });
    if (!c.expected) return evaluate(c.value, c.step);
    if (accessed_[0] && accessed_[1])
      attempt("size", [&] { checkSameCount("check", operand(c.ref, 0), operand(*c.expected, 1)); });
  }
  void operator()(const instr::Copy& c, int) {
    const DType from = plan_.allocs[c.src.alloc].dtype, to = plan_.allocs[c.dst.alloc].dtype;
    if (from != to)
      problem("dtype", [&] {
        return fmt::format("copy from {} '{}' to {} '{}': both need the same dtype", toString(from),
                           c.src.text, toString(to), c.dst.text);
      });
    const std::optional<Range>&src = accessed_[0], &dst = accessed_[1];
    if (src && dst && src->count != dst->count)
      problem("size", [&] {
        return fmt::format(
            "copies {} elements of '{}' into {} elements of '{}'; a copy needs equal sizes",
            src->count, c.src.text, dst->count, c.dst.text);
      });
  }

  // ------------------------------------------------------------- compute
  // The accesses were resolved and checked for hazards before they ran;
  // what is left are the shapes, by the core's rules.
  void operator()(const instr::Matmul& m, int) {
    if (!accessed_[0] || !accessed_[1] || !accessed_[2]) return;
    attempt("size", [&] {
      matmulShape(m, operand(m.a, 0), operand(m.b, 1), operand(m.out, 2));
    });
  }
  void operator()(const instr::Add& a, int) {
    if (!accessed_[0] || !accessed_[1] || !accessed_[2]) return;
    attempt("size", [&] { checkAddShapes(operand(a.a, 0), operand(a.b, 1), operand(a.out, 2)); });
  }
  void operator()(const instr::Unary& u, int) {
    attempt("evaluate", [&] { u.factor.eval(scalars_.data()); });
    if (accessed_[0] && accessed_[1])
      attempt("size", [&] { checkSameCount(toString(u.op), operand(u.in, 0), operand(u.out, 1)); });
  }
  void operator()(const instr::Kernel& k, int) {
    for (const auto& arg : k.args) attempt("evaluate", [&] { arg.second.eval(scalars_.data()); });
  }

 private:
  void evaluate(const CompiledExpr& value, const CompiledExpr& step) {
    attempt("evaluate", [&] {
      value.eval(scalars_.data());
      step.eval(scalars_.data());
    });
  }

  // Access i of the current instruction, resolved to `ref`, as the core's
  // shape rules take it.
  Operand operand(const PlanRef& ref, int i) const {
    return Operand{&ref, &*layouts_[ref.alloc], spans_[i]};
  }

  // A collective on a rank outside its team: the rank skips the node.
  bool skips(const instr::Post& p) const {
    const PlanComm& c = plan_.comms[p.comm];
    return !isPointToPoint(c.type) && teamRankOf(plan_.teams[c.team], rank_) < 0;
  }

  // Resolves what `in` reads and writes into accessed_ (nullopt for a
  // reference that did not resolve, reported) and checks each against the
  // pending communications. Every instruction goes through here, so a new
  // instruction's accesses are checked without code of its own.
  void resolveAccesses(const Instr& in) {
    accessed_.fill(std::nullopt);
    const auto* post = std::get_if<instr::Post>(&in.op);
    if (post && skips(*post)) return;
    std::array<Access, kMaxAccesses> kinds;
    std::array<const std::string*, kMaxAccesses> texts;
    std::array<ResolvedAccess, kMaxAccesses> resolved;
    int n = 0, whole = 0;
    forEachAccess(plan_, in, [&](const PlanRef& ref, Access access) {
      HIR_INTERNAL_ASSERT(n < kMaxAccesses, "instruction with more than {} accesses",
                          kMaxAccesses);
      std::optional<Range> r;
      if (std::optional<RefSpan> span = resolve(ref)) {
        spans_[n] = *span;
        r = Range{ref.alloc, span->offset, span->count};
        resolved[whole++] = ResolvedAccess{&ref, access, span->offset, span->count};
      }
      kinds[n] = access;
      texts[n] = &ref.text;
      accessed_[n++] = r;
    });
    if (n == 0) return;
    attempt("alias", [&] { checkAliasing(in, std::span(resolved.data(), whole)); });
    // Who accesses: the post (its number in its unit; a group's was taken
    // at its begin) or an operation on the current stream.
    Accessor who;
    who.stream = stream_;
    who.pc = pc_;
    who.site = site();
    if (post) {
      const PlanComm& c = plan_.comms[post->comm];
      who.unit = c.group >= 0 ? groupUnit(c.group) : unitOf(post->comm);
      who.epoch = ord_.posts(who.unit) + (c.group >= 0 ? 0 : 1);
    } else {
      who.epoch = ord_.tick(stream_);
    }
    // Every access is checked against what came before the instruction,
    // then recorded: an instruction does not conflict with itself.
    for (int k = 0; k < n; ++k)
      if (accessed_[k]) checkAccess(*accessed_[k], kinds[k], *texts[k], who);
    for (int k = 0; k < n; ++k)
      if (const std::optional<Range>& r = accessed_[k])
        shadow_.record(r->alloc, r->offset, r->offset + r->count, kinds[k], who, stream_, ord_);
  }

  // A communication or group whose latest post no wait followed: the run
  // joins it at its end (docs/ir.md), which is legal but rarely meant.
  void notePendingAtEnd() {
    const int comms = static_cast<int>(plan_.comms.size());
    for (int unit = 0; unit < static_cast<int>(pending_node_.size()); ++unit) {
      if (pending_node_[unit] < 0 || !findings_.noted_units_.insert(unit).second) continue;
      if (findings_.notes_.size() >= kMaxIssues) return;
      const bool group = unit >= comms;
      findings_.notes_.push_back(
          {plan_.nodes[pending_node_[unit]].path,
           fmt::format("on rank {}: {} '{}' is still pending when the program ends (its latest "
                       "post was never waited on); the run joins it at its end, so its buffers "
                       "stay busy until then: wait on it where its result is needed",
                       rank_, group ? "group" : "communication",
                       group ? plan_.groups[unit - comms].name : plan_.comms[unit].name)});
    }
  }

  Site site() const {
    return Site{&plan_, node_, LoopValues(plan_.nodes[node_].loop_slots, scalars_)};
  }

  // "on rank 1 (i=2)": who is at the current instruction.
  std::string who() const {
    std::string loops = site().loops();
    return loops.empty() ? fmt::format("on rank {}", rank_)
                         : fmt::format("on rank {} ({})", rank_, loops);
  }

  // Reports a problem at the current instruction, once per `kind` (see
  // dry_run.h); `make_message` runs only if the problem is reported.
  template <class MakeMessage>
  void problem(const std::string& kind, MakeMessage&& make_message) {
    if (!findings_.firstAt(pc_, kind)) return;
    findings_.add(plan_.nodes[node_].path, fmt::format("{}: {}", who(), make_message()));
  }

  // Notes the current instruction as what stops a graph capture, unless
  // something (on this rank or an earlier one) did already.
  template <class MakeMessage>
  void captureBlocker(MakeMessage&& make_message) {
    if (findings_.capture_blocker_) return;
    findings_.capture_blocker_ =
        Issue{plan_.nodes[node_].path, fmt::format("{}: {}", who(), make_message())};
  }

  // A post (of a communication of `type`, or a group's) on backend `b`.
  void notCapturableBackend(int b, std::optional<CommType> type) {
    if (plan_.backends[b].capturable) return;
    captureBlocker([&] {
      return fmt::format("{} through backend '{}', whose posts cannot be captured into a graph",
                         type ? fmt::format("posts a {}", toString(*type))
                              : std::string("posts a group"),
                         plan_.backends[b].name);
    });
  }

  // Runs a rule of the core; its ProgramError becomes a problem of `kind`.
  // Once a rule threw at an instruction, this rank skips the instruction's
  // rules from then on (reported once anyway; an exception per loop
  // iteration made the check of a failing program take minutes), except the
  // peer and root, which decide what is recorded for matching.
  template <class Rule>
  bool attempt(std::string_view kind, Rule&& rule) {
    const bool matching = kind == "peer" || kind == "root";
    if (threw_[pc_] && !matching) return false;
    try {
      rule();
      return true;
    } catch (const ProgramError& e) {
      threw_[pc_] = true;
      problem(std::string(kind), [&] { return std::string(e.what()); });
      return false;
    }
  }


  std::optional<RefSpan> resolve(const PlanRef& ref) {
    if (bad_alloc_[ref.alloc]) return std::nullopt;
    const auto& layout = layouts_[ref.alloc];
    if (!layout) {
      problem("unallocated:" + ref.text, [&] {
        return fmt::format("'{}' refers to '{}', which is not allocated on this rank now", ref.text,
                           plan_.allocs[ref.alloc].name);
      });
      return std::nullopt;
    }
    std::optional<RefSpan> out;
    attempt("ref", [&] { out = resolveRef(ref, *layout, scalars_.data()); });
    return out;
  }

  // ------------------------------------------------------------- hazards
  int unitOf(int comm) const {
    const int g = plan_.comms[comm].group;
    return g >= 0 ? groupUnit(g) : comm;
  }
  int groupUnit(int group) const { return static_cast<int>(plan_.comms.size()) + group; }

  // Reports the first earlier access that `who`'s access of `r` conflicts
  // with and is not ordered after.
  void checkAccess(const Range& r, Access kind, const std::string& text, const Accessor& who) {
    std::optional<Conflict> c =
        shadow_.check(r.alloc, r.offset, r.offset + r.count, kind, who, stream_, ord_);
    if (!c) return;
    problem("hazard:" + priorKey(c->prior), [&] {
      const char* verb = kind == Access::Read ? "reads" : "writes";
      const char* its = c->prior_writes ? "writes" : "reads";
      if (c->prior.isPost())
        return fmt::format("{} {}{} while {} that {} it {}", verb, spanText(r, text),
                           onStream(), priorText(c->prior), its, pendingText(c->prior));
      return fmt::format(
          "{} {} on stream {} while the {} at {} on stream {} {} it, and nothing orders stream "
          "{} after that: sync_stream {} first",
          verb, spanText(r, text), stream_, opName(plan_, plan_.code[c->prior.pc]),
          c->prior.site.str(), c->prior.stream, its, stream_, c->prior.stream);
    });
  }

  // " on stream k" when the rank uses another stream than 0.
  std::string onStream() const {
    return stream_ == 0 ? std::string() : fmt::format(" on stream {}", stream_);
  }

  // Reported once per instruction and earlier access.
  std::string priorKey(const Accessor& a) const {
    return a.isPost() ? fmt::format("u{}", a.unit) : fmt::format("n{}", a.site.node);
  }

  // "communication 'r' (/body/3, i=0)".
  std::string priorText(const Accessor& a) const {
    return fmt::format("{} ({}{})", opName(plan_, plan_.code[a.pc]), a.site.str(),
                       a.stream == 0 ? std::string() : fmt::format(", posted on stream {}", a.stream));
  }

  // Why the post `a` is still pending for the current stream.
  std::string pendingText(const Accessor& a) const {
    const std::string& name = waitName(a);
    const std::vector<int> on = ord_.knownOn(a.unit, a.epoch);
    if (on.empty()) return fmt::format("is still pending; wait on '{}' first", name);
    std::string streams;
    for (std::size_t k = 0; k < on.size(); ++k)
      streams += fmt::format("{}{}", k ? (k + 1 == on.size() ? " and " : ", ") : "", on[k]);
    return fmt::format(
        "was waited on stream{} {} only, and nothing orders stream {} after that wait: wait on "
        "'{}' on stream {} too, or sync_stream {} first",
        on.size() == 1 ? "" : "s", streams, stream_, name, stream_, on.front());
  }

  // The name a wait for post `a` uses: its communication's (in a group,
  // waiting on it waits for the group).
  const std::string& waitName(const Accessor& a) const {
    return plan_.comms[std::get<instr::Post>(plan_.code[a.pc].op).comm].name;
  }

  std::string spanText(const Range& r, const std::string& text) const {
    return fmt::format("'{}' (elements [{}, {}) of '{}')", text, r.offset, r.offset + r.count,
                       plan_.allocs[r.alloc].name);
  }

  // ------------------------------------------------------ communications
  void postMessage(int slot, const PlanComm& c, const std::optional<Range>& tensor, DType dtype,
                   int peer, int part, Site here) {
    checkPeerNode(c, peer);
    MessageRecord rec;
    rec.count = tensor ? std::optional<int64_t>(tensor->count) : std::nullopt;
    rec.dtype = dtype;
    rec.site = std::move(here);
    rec.comm = slot;
    rec.range = tensor;
    rec.backend = c.backend;
    const std::size_t bytes = tensor ? static_cast<std::size_t>(tensor->count) * dtypeSize(dtype) : 0;
    // Refused (reported): matched as asked, so that the peer's end still meets it.
    rec.protocol = c.protocol == Protocol::Auto ? Protocol::Put : c.protocol;
    attempt("protocol",
            [&] { rec.protocol = plan_.backends[c.backend].protocolFor(c.protocol, bytes); });
    rec.part = part;
    if (c.type == CommType::Send)
      findings_.sends_[{rank_, peer}].push_back(std::move(rec));
    else
      findings_.recvs_[{peer, rank_}].push_back(std::move(rec));
  }

  // A collective that its backend runs as messages between the team's
  // members (ipc): its messages join the pairs' sends and recvs, in this
  // rank's order, to be matched across ranks with them and traced. Returns
  // the algorithm's name (empty when the backend refused the collective,
  // which is reported).
  std::string_view postCollectiveMessages(int slot, const PlanComm& c, const Range& in,
                                          const Range& out, DType dtype, int64_t chunk, int root,
                                          const Site& here) {
    const PlanTeam& team = plan_.teams[c.team];
    const CollectiveShape shape =
        collectiveShape(c, team, rank_, dtype, static_cast<std::size_t>(chunk), root,
                        in.alloc == out.alloc && in.offset == out.offset);
    const std::size_t instance =
        findings_.collectives_[c.team][static_cast<std::size_t>(shape.me)].size();
    std::string_view algorithm;
    if (!attempt("collective", [&] {
          algorithm = plan_.backends[c.backend].collectiveMessages(shape, messages_);
        }))
      return {};
    for (const CollectiveMessage& m : messages_) {
      const bool sending = m.from == shape.me;
      const int peer = team.ranks[sending ? m.to : m.from];
      checkPeerNode(c, peer);
      MessageRecord rec;
      rec.count = static_cast<int64_t>(m.count);
      rec.dtype = dtype;
      rec.site = here;
      rec.comm = slot;
      const Range& mine = sending && !m.from_output ? in : out;
      rec.range = Range{mine.alloc,
                        mine.offset + static_cast<int64_t>(sending ? m.from_offset : m.to_offset),
                        static_cast<int64_t>(m.count)};
      rec.backend = c.backend;
      rec.protocol = m.protocol;
      rec.collective = true;
      rec.team = c.team;
      rec.instance = static_cast<int64_t>(instance);
      if (sending)
        findings_.sends_[{rank_, peer}].push_back(std::move(rec));
      else
        findings_.recvs_[{peer, rank_}].push_back(std::move(rec));
    }
    return algorithm;
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
                         toString(c.type),
                         c.type == CommType::Send   ? "to"
                         : c.type == CommType::Recv ? "from"
                                                    : "with",
                         peer,
                         plan_.backends[c.backend].name, peer, nodes[peer], rank_, nodes[rank_],
                         c.cross_node_why);
    });
  }

  const Plan& plan_;
  const ScheduleCheckOptions& options_;
  Findings& findings_;
  const int rank_;
  std::vector<int64_t> scalars_;
  std::vector<std::optional<Layout>> layouts_;  // per alloc, while allocated
  std::vector<std::optional<std::size_t>> alloc_bytes_;  // per alloc: its latest size in bytes
  std::vector<bool> bad_alloc_;                 // allocate failed: uses stay quiet
  std::vector<bool> threw_;                     // per instruction: a rule threw here
  std::vector<bool> comm_seen_, group_seen_;    // posted (or skipped) so far
  std::array<std::optional<Range>, kMaxAccesses> accessed_;  // of the current instruction
  std::array<RefSpan, kMaxAccesses> spans_;  // their spans, where accessed_ has a value
  std::vector<CollectiveMessage> messages_;  // postCollectiveMessages()' scratch
  Ordering ord_;
  std::vector<int> pending_node_;  // per unit: the node of its unwaited latest post, or -1
  Shadow shadow_;
  RankGraph graph_;
  int stream_ = 0;  // the current stream
  int pc_ = 0, node_ = 0;
  bool stopped_ = false;
};

}  // namespace

Findings simulate(const Plan& plan, const ScheduleCheckOptions& options) {
  HIR_INTERNAL_ASSERT(plan.world >= 1, "plan for world {}", plan.world);
  HIR_INTERNAL_ASSERT(!plan.teams.empty(), "plan without the world team");
  HIR_INTERNAL_ASSERT(options.nodes.empty() || static_cast<int>(options.nodes.size()) == plan.world,
                      "{} node names for a world of {}", options.nodes.size(), plan.world);
  Findings findings(plan);
  findings.steps_per_rank_ =
      std::min(options.max_steps_per_rank,
               std::max<int64_t>(options.max_steps_total / plan.world, 2'000));
  for (int rank = 0; rank < plan.world; ++rank) RankRun(plan, options, findings, rank).run();
  return findings;
}

}  // namespace hir::dry
