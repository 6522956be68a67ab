// Lowering: Program -> Plan. One pre-order walk that assigns slots, compiles
// expressions and emits flat code with jumps. See plan.h for what the
// instructions mean.
#include "lower/lower.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include <hostir/backend.h>
#include "common/check.h"
#include "common/overloaded.h"
#include "ir/team.h"
#include "ir/walk.h"

namespace hir {
namespace {

class Lowerer {
 public:
  Lowerer(const Program& program, const LowerOptions& options)
      : program_(program), options_(options) {}

  Plan run() {
    plan_.name = program_.name;
    plan_.world = options_.world;
    plan_.device = options_.device;
    addScalar("rank", 0);
    addScalar("world", options_.world);
    for (const Param& p : program_.params) addScalar(p.name, p.value);
    plan_.globals = static_cast<int>(plan_.scalar_names.size());
    plan_.teams.push_back(PlanTeam{worldRanks()});

    declareAll(program_.body);
    collectExplicitShares(program_.body);
    collectImplicitUsers(program_.body);
    scopes_.emplace_back();
    emitBody(program_.body, "", /*top=*/true);
    scopes_.pop_back();
    markJoinedPosts();
    return std::move(plan_);
  }

 private:
  // ---------------------------------------------------------------- scalars
  int addScalar(const std::string& name, int64_t value) {
    plan_.scalar_names.push_back(name);
    plan_.scalar_init.push_back(value);
    return static_cast<int>(plan_.scalar_names.size()) - 1;
  }

  int slotOf(std::string_view name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(std::string(name));
      if (f != it->end()) return f->second;
    }
    // rank, world and params are the first slots.
    std::size_t globals = 2 + program_.params.size();
    for (std::size_t i = 0; i < globals; ++i)
      if (plan_.scalar_names[i] == name) return static_cast<int>(i);
    return -1;
  }

  CompiledExpr compile(const Expr& e) const {
    return CompiledExpr::compile(e, [this](std::string_view n) { return slotOf(n); });
  }
  instr::CompiledReal compile(const Real& r) const {
    instr::CompiledReal out;
    out.number = r.number;
    out.is_expr = r.isExpr();
    if (out.is_expr) out.expr = compile(r.expr);
    return out;
  }

  std::vector<int> loopSlots() const {
    std::vector<int> out;
    for (const auto& scope : scopes_)
      for (const auto& [name, slot] : scope) out.push_back(slot);
    return out;
  }

  int addNode(const std::string& path) {
    plan_.nodes.push_back(PlanNode{path, loopSlots()});
    return static_cast<int>(plan_.nodes.size()) - 1;
  }

  void emit(decltype(Instr::op) op, int node) { plan_.code.push_back(Instr{std::move(op), node}); }

  int pc() const { return static_cast<int>(plan_.code.size()); }

  // ----------------------------------------------------- declarations first
  // Allocations, communications and groups get slots before any code is
  // emitted, so share_mem_handles may name communications that come later.
  void declareAll(const Body& body) {
    for (const Node& n : body) {
      std::visit(
          Overloaded{
              [&](const Allocate& a) { declareAlloc(a); },
              [&](const Deallocate&) {},
              [&](const Communication& c) { declareComm(c); },
              [&](const ShareMemHandles&) {},
              [&](const Wait&) {},
              [&](const ForLoop& f) { declareAll(f.body); },
              [&](const If& i) {
                declareAll(i.then_body);
                declareAll(i.else_body);
              },
              [&](const SetStream&) {},
              [&](const SyncStream&) {},
              [&](const Group& g) {
                HIR_INTERNAL_ASSERT(!group_slots_.count(g.name), "group '{}' declared twice",
                                    g.name);
                group_slots_[g.name] = static_cast<int>(plan_.groups.size());
                plan_.groups.push_back(PlanGroup{g.name, -1, -1});
                declareAll(g.body);
              },
              [&](const Fill&) {},
              [&](const Copy&) {},
              [&](const Check&) {},
              [&](const Matmul&) {},
              [&](const Add&) {},
              [&]<UnaryOp Op>(const Elementwise<Op>&) {},
              [&](const Kernel&) {},
          },
          n.v);
    }
  }

  void declareAlloc(const Allocate& a) {
    HIR_INTERNAL_ASSERT(!alloc_slots_.count(a.name), "allocation '{}' declared twice", a.name);
    alloc_slots_[a.name] = static_cast<int>(plan_.allocs.size());
    PlanAlloc pa;
    pa.name = a.name;
    pa.dtype = a.dtype;
    pa.bindable = std::count(program_.inputs.begin(), program_.inputs.end(), a.name) ||
                  std::count(program_.outputs.begin(), program_.outputs.end(), a.name);
    plan_.allocs.push_back(std::move(pa));
  }

  void declareComm(const Communication& c) {
    HIR_INTERNAL_ASSERT(!comm_slots_.count(c.name), "communication '{}' declared twice",
                        c.name);
    comm_slots_[c.name] = static_cast<int>(plan_.comms.size());
    plan_.comms.emplace_back();
  }

  void collectExplicitShares(const Body& body) {
    walkNodes(body, [&](const Node& n) {
      if (const auto* s = std::get_if<ShareMemHandles>(&n.v))
        explicitly_shared_.insert(s->communications.begin(), s->communications.end());
    });
  }

  // A communication whose exchange lowering inserts: on a backend that maps
  // peer memory ("auto" never picks one) and not listed by an explicit
  // share_mem_handles.
  bool implicitlyShared(const Communication& c) const {
    const BackendCaps* caps = findCaps(options_.backends, c.backend);
    return caps != nullptr && caps->maps_peer_memory && !explicitly_shared_.count(c.name);
  }

  // Per allocation name: the implicitly shared communications that use it.
  void collectImplicitUsers(const Body& body) {
    walkNodes(body, [&](const Node& n) {
      const auto* c = std::get_if<Communication>(&n.v);
      if (c == nullptr || !implicitlyShared(*c)) return;
      for (const auto* ref : {&c->tensor, &c->input, &c->output})
        if (*ref) implicit_users_[(*ref)->name].push_back(comm_slots_.at(c->name));
    });
  }

  // Communications in `n` whose exchange lowering inserts.
  void implicitShares(const Node& n, std::vector<int>& out) const {
    walkNodes(n, [&](const Node& m) {
      if (const auto* c = std::get_if<Communication>(&m.v); c && implicitlyShared(*c))
        out.push_back(comm_slots_.at(c->name));
    });
  }

  // ------------------------------------------------------------------ code
  void emitBody(const Body& body, const std::string& parent, bool top,
                std::string_view field = "body") {
    ++depth_;
    for (std::size_t i = 0; i < body.size(); ++i) {
      // Adjacent send/recv nodes are posted as one unit (see adjacentP2p).
      std::size_t last = current_group_ < 0 ? adjacentP2pEnd(body, i) : i;
      for (std::size_t k = i; k <= last && top; ++k) {
        // An ipc communication without an explicit exchange gets one here,
        // before the outermost loop (or node) that holds it.
        std::vector<int> implicit;
        implicitShares(body[k], implicit);
        if (!implicit.empty())
          emit(instr::Share{std::move(implicit)}, addNode(childPath(parent, field, k)));
      }
      if (last > i) {
        emitAdjacentP2p(body, i, last, parent, field);
        i = last;
        continue;
      }
      emitNode(body[i], childPath(parent, field, i));
    }
    --depth_;
  }

  // The last index of the run of send/recv nodes starting at `i` that name
  // the same backend (i itself if body[i] starts no run).
  static std::size_t adjacentP2pEnd(const Body& body, std::size_t i) {
    auto p2p = [&](std::size_t k) -> const Communication* {
      auto* c = std::get_if<Communication>(&body[k].v);
      return c && isPointToPoint(c->type) ? c : nullptr;
    };
    const Communication* first = p2p(i);
    if (!first) return i;
    std::size_t j = i;
    while (j + 1 < body.size() && p2p(j + 1) && p2p(j + 1)->backend == first->backend) ++j;
    return j;
  }

  // A run of adjacent send/recv nodes outside any group is posted as one
  // unit, as NCCL's ncclGroupStart/End would: separate posts of a ring's
  // send and recv could otherwise deadlock on a backend that runs them in
  // order on one stream (NCCL with large messages), and a send to oneself
  // needs its recv in the same group. Waits on each node still work; they
  // wait for the unit.
  void emitAdjacentP2p(const Body& body, std::size_t first, std::size_t last,
                       const std::string& parent, std::string_view field) {
    std::string path = childPath(parent, field, first);
    int slot = static_cast<int>(plan_.groups.size());
    plan_.groups.push_back(PlanGroup{
        fmt::format("(send/recv {} to {})", path, childPath(parent, field, last)), -1, -1});
    int node = addNode(path);
    plan_.groups[slot].node = node;
    current_group_ = slot;
    emit(instr::GroupBegin{slot}, node);
    for (std::size_t k = first; k <= last; ++k) emitNode(body[k], childPath(parent, field, k));
    emit(instr::GroupEnd{slot}, node);
    current_group_ = -1;
  }

  void emitNode(const Node& n, const std::string& path) {
    int node = addNode(path);
    std::visit(
        Overloaded{
            [&](const Allocate& a) {
              PlanAlloc& pa = plan_.allocs[alloc_slots_.at(a.name)];
              pa.node = node;
              for (const Expr& e : a.shape) pa.shape.push_back(compile(e));
              emit(instr::Allocate{alloc_slots_.at(a.name)}, node);
              // Allocated inside a loop or if: the exchange hoisted before
              // the top-level node ran before this memory existed, so the
              // implicitly shared users exchange again here (a no-op once
              // the block is known, as it is cached across iterations).
              auto users = implicit_users_.find(a.name);
              if (depth_ > 1 && users != implicit_users_.end())
                emit(instr::Share{users->second}, node);
            },
            [&](const Deallocate& d) { emit(instr::Deallocate{allocSlot(d.name, path)}, node); },
            [&](const Communication& c) {
              int slot = comm_slots_.at(c.name);
              lowerComm(c, slot, node, path);
              // Inside a group, the post is collected until GroupEnd.
              emit(instr::Post{slot}, node);
            },
            [&](const ShareMemHandles& s) {
              std::vector<int> comms;
              for (const std::string& name : s.communications) comms.push_back(commSlot(name, path));
              emit(instr::Share{std::move(comms), /*written=*/true}, node);
            },
            [&](const Wait& w) {
              instr::Wait out;
              out.mode = w.mode;
              if (auto it = comm_slots_.find(w.communication); it != comm_slots_.end())
                out.comm = it->second;
              else if (auto g = group_slots_.find(w.communication); g != group_slots_.end())
                out.group = g->second;
              else
                throw ProgramError(fmt::format(
                    "{}: wait on '{}', which is not a communication or group", path,
                    w.communication));
              emit(out, node);
            },
            [&](const ForLoop& f) { lowerFor(f, node, path); },
            [&](const If& i) { lowerIf(i, node, path); },
            [&](const SetStream& s) { emit(instr::SetStream{compile(s.stream)}, node); },
            [&](const SyncStream& s) { emit(instr::SyncStream{compile(s.stream)}, node); },
            [&](const Group& g) {
              int slot = group_slots_.at(g.name);
              plan_.groups[slot].node = node;
              HIR_CHECK(current_group_ < 0, "{}: group '{}' is nested in group '{}'", path,
                        g.name, plan_.groups[current_group_].name);
              current_group_ = slot;
              emit(instr::GroupBegin{slot}, node);
              emitBody(g.body, path, false);
              emit(instr::GroupEnd{slot}, node);
              current_group_ = -1;
            },
            [&](const Fill& f) {
              instr::Fill out{lowerRef(f.tensor, path), {}, {}, std::nullopt};
              if (f.random) {
                out.random = instr::RandomFill{compile(f.random->seed), compile(f.random->low),
                                               compile(f.random->high)};
              } else {
                out.value = compile(f.value);
                out.step = compile(f.step);
              }
              emit(std::move(out), node);
            },
            [&](const Copy& c) {
              emit(instr::Copy{lowerRef(c.src, path), lowerRef(c.dst, path)}, node);
            },
            [&](const Check& c) {
              int check = static_cast<int>(plan_.checks.size());
              plan_.checks.push_back(PlanCheck{node, c.tensor.str()});
              instr::Check out{lowerRef(c.tensor, path), {}, {}, std::nullopt,
                               compile(c.rtol), compile(c.atol), check};
              if (c.expected) {
                out.expected = lowerRef(*c.expected, path);
              } else {
                out.value = compile(c.value);
                out.step = compile(c.step);
              }
              if (c.tolerance != 0) out.atol.number = c.tolerance;
              emit(std::move(out), node);
            },
            [&](const Matmul& m) {
              emit(instr::Matmul{lowerRef(m.a, path), lowerRef(m.b, path), lowerRef(m.out, path),
                                 m.transpose_a, m.transpose_b, m.accumulate},
                   node);
            },
            [&](const Add& a) {
              emit(instr::Add{lowerRef(a.a, path), lowerRef(a.b, path), lowerRef(a.out, path)},
                   node);
            },
            [&]<UnaryOp Op>(const Elementwise<Op>& e) {
              emit(instr::Unary{Op, lowerRef(e.input, path), lowerRef(e.output, path),
                                compile(e.factor)},
                   node);
            },
            [&](const Kernel& k) {
              instr::Kernel out;
              out.kernel = kernelIndex(k.name);
              for (const TensorRef& r : k.reads) out.reads.push_back(lowerRef(r, path));
              for (const TensorRef& w : k.writes) out.writes.push_back(lowerRef(w, path));
              for (const auto& [name, e] : k.args) out.args.emplace_back(name, compile(e));
              emit(std::move(out), node);
            },
        },
        n.v);
  }

  void lowerFor(const ForLoop& f, int node, const std::string& path) {
    // start/stop/step are evaluated outside the loop's scope.
    CompiledExpr start = compile(f.start), stop = compile(f.stop), step = compile(f.step);
    int slot = addScalar(f.index, 0);
    int stop_slot = addScalar(f.index + ".stop", 0);
    int step_slot = addScalar(f.index + ".step", 0);
    int init_pc = pc();
    emit(instr::LoopInit{slot, stop_slot, step_slot, std::move(start), std::move(stop),
                         std::move(step), -1},
         node);
    scopes_.push_back({{f.index, slot}});
    // The body's nodes know the loop index (for messages).
    emitBody(f.body, path, false);
    scopes_.pop_back();
    emit(instr::LoopNext{slot, stop_slot, step_slot, init_pc + 1}, node);
    std::get<instr::LoopInit>(plan_.code[init_pc].op).exit = pc();
  }

  void lowerIf(const If& i, int node, const std::string& path) {
    int branch_pc = pc();
    emit(instr::JumpIfZero{compile(i.cond), -1}, node);
    emitBody(i.then_body, path, false, "then");
    int jump_pc = -1;
    if (!i.else_body.empty()) {
      jump_pc = pc();
      emit(instr::Jump{-1}, node);
    }
    std::get<instr::JumpIfZero>(plan_.code[branch_pc].op).target = pc();
    if (jump_pc >= 0) {
      emitBody(i.else_body, path, false, "else");
      std::get<instr::Jump>(plan_.code[jump_pc].op).target = pc();
    }
  }

  int allocSlot(const std::string& name, const std::string& path) const {
    auto it = alloc_slots_.find(name);
    HIR_CHECK(it != alloc_slots_.end(), "{}: '{}' is not an allocation", path, name);
    return it->second;
  }

  int commSlot(const std::string& name, const std::string& path) const {
    auto it = comm_slots_.find(name);
    HIR_CHECK(it != comm_slots_.end(), "{}: '{}' is not a communication", path, name);
    return it->second;
  }

  PlanRef lowerRef(const TensorRef& r, const std::string& path) const {
    PlanRef out;
    out.alloc = allocSlot(r.name, path);
    for (const Expr& e : r.select) out.select.push_back(compile(e));
    if (r.range) {
      out.has_range = true;
      out.range_begin = compile(r.range->first);
      out.range_end = compile(r.range->second);
    }
    out.text = r.str();
    return out;
  }

  // ------------------------------------------------------- communications
  void lowerComm(const Communication& c, int slot, int node, const std::string& path) {
    PlanComm& comm = plan_.comms[slot];
    comm.name = c.name;
    comm.node = node;
    comm.type = c.type;
    comm.reduce = c.reduce.value_or(ReduceOp::Sum);
    comm.protocol = c.protocol;
    comm.group = current_group_;
    if (isPointToPoint(c.type)) {
      HIR_INTERNAL_ASSERT(c.tensor && c.peer, "{}: unvalidated send/recv", path);
      (c.type == CommType::Send ? comm.input : comm.output) = lowerRef(*c.tensor, path);
      comm.peer = compile(*c.peer);
    } else {
      HIR_INTERNAL_ASSERT(c.input && c.output, "{}: unvalidated collective", path);
      comm.input = lowerRef(*c.input, path);
      comm.output = lowerRef(*c.output, path);
      if (c.root) comm.root = compile(*c.root);
    }
    comm.team = lowerTeam(c.team, path);

    DType dtype = plan_.allocs[(comm.input ? comm.input : comm.output)->alloc].dtype;
    SupportQuery q;
    q.device = options_.device;
    q.type = c.type;
    q.dtype = dtype;
    q.reduce = comm.reduce;
    q.protocol = c.protocol;  // a protocol the chosen backend does not take is an error
    const BackendCaps& caps = selectBackend(options_.backends, c.backend, q, path);
    comm.backend = backendIndex(caps);
    if (caps.maps_peer_memory) {
      if (comm.input) plan_.allocs[comm.input->alloc].peer_mapped = true;
      if (comm.output) plan_.allocs[comm.output->alloc].peer_mapped = true;
    }
    if (isPointToPoint(c.type) || caps.collective_messages != nullptr) {
      // Binding is per node, not per pair of ranks: whether a peer is on
      // another node is checked per rank by the schedule check (for a
      // collective run as messages, per message).
      q.peer_on_other_node = true;
      Support remote = supports(caps, q);
      if (!remote.ok) comm.cross_node_why = remote.why;
    }
    if (current_group_ >= 0) {
      PlanGroup& g = plan_.groups[current_group_];
      if (g.backend < 0) g.backend = comm.backend;
      HIR_CHECK(g.backend == comm.backend,
                "{}: communication '{}' uses backend '{}' but group '{}' already uses '{}'; a "
                "group is posted as one unit on one backend",
                path, c.name, plan_.backends[comm.backend].name, g.name, plan_.backends[g.backend].name);
    }
  }

  int kernelIndex(const std::string& name) {
    auto it = std::find(plan_.kernels.begin(), plan_.kernels.end(), name);
    if (it != plan_.kernels.end()) return static_cast<int>(it - plan_.kernels.begin());
    plan_.kernels.push_back(name);
    return static_cast<int>(plan_.kernels.size()) - 1;
  }

  int backendIndex(const BackendCaps& caps) {
    for (std::size_t i = 0; i < plan_.backends.size(); ++i)
      if (plan_.backends[i].name == caps.name) return static_cast<int>(i);
    plan_.backends.push_back(
        PlanBackend{caps.name, caps.maps_peer_memory, caps.post_order, caps.capturable,
                    caps.symmetric_memory, caps.collective_messages, caps.resolve_protocol,
                    options_.settings});
    return static_cast<int>(plan_.backends.size()) - 1;
  }

  std::vector<int> worldRanks() const {
    std::vector<int> r(options_.world);
    for (int i = 0; i < options_.world; ++i) r[i] = i;
    return r;
  }

  // Teams are evaluated once, here, with world and params only (ir/team.h,
  // which validation used to report every problem).
  int lowerTeam(const Team& team, const std::string& path) {
    if (team.all) return 0;
    std::vector<int> ranks;
    const std::vector<TeamMember> members =
        evaluateTeam(team, options_.world, program_.params);
    for (std::size_t i = 0; i < members.size(); ++i) {
      HIR_CHECK(members[i].problem.empty() && members[i].rank, "{}/team/{}: {}", path, i,
                members[i].problem);
      ranks.push_back(static_cast<int>(*members[i].rank));
    }
    HIR_CHECK(!ranks.empty(), "{}/team: a team needs at least one rank", path);
    for (std::size_t t = 0; t < plan_.teams.size(); ++t)
      if (plan_.teams[t].ranks == ranks) return static_cast<int>(t);
    plan_.teams.push_back(PlanTeam{std::move(ranks)});
    return static_cast<int>(plan_.teams.size()) - 1;
  }

  // Sets Post::joined and GroupEnd::joined (see plan.h).
  void markJoinedPosts() {
    const std::vector<Instr>& code = plan_.code;
    std::vector<int> comm_waits(plan_.comms.size()), group_waits(plan_.groups.size());
    for (const Instr& ins : code)
      if (const auto* w = std::get_if<instr::Wait>(&ins.op))
        ++(w->comm >= 0 ? comm_waits[w->comm] : group_waits[w->group]);
    for (std::size_t pc = 0; pc < code.size(); ++pc) {
      std::vector<int> unit;  // the communications the instruction posts
      int group = -1;
      bool* joined = nullptr;
      if (auto* p = std::get_if<instr::Post>(&plan_.code[pc].op)) {
        if (plan_.comms[p->comm].group >= 0) continue;  // collected, posted by its GroupEnd
        unit.push_back(p->comm);
        joined = &p->joined;
      } else if (auto* e = std::get_if<instr::GroupEnd>(&plan_.code[pc].op)) {
        group = e->group;
        for (std::size_t c = 0; c < plan_.comms.size(); ++c)
          if (plan_.comms[c].group == group) unit.push_back(static_cast<int>(c));
        joined = &e->joined;
      } else {
        continue;
      }
      // The stream-mode waits right after it.
      std::map<int, int> comm_run, group_run;
      for (std::size_t q = pc + 1; q < code.size(); ++q) {
        const auto* w = std::get_if<instr::Wait>(&code[q].op);
        if (w == nullptr || w->mode != WaitMode::Stream) break;
        ++(w->comm >= 0 ? comm_run[w->comm] : group_run[w->group]);
      }
      const bool group_waited = group >= 0 && group_run[group] > 0;
      bool all = group < 0 || group_run[group] == group_waits[group];
      for (int c : unit)
        all = all && comm_run[c] == comm_waits[c] && (group_waited || comm_run[c] > 0);
      *joined = all;
    }
  }

  const Program& program_;
  const LowerOptions& options_;
  Plan plan_;
  std::vector<std::map<std::string, int>> scopes_;  // loop index -> slot
  std::unordered_map<std::string, int> alloc_slots_, comm_slots_, group_slots_;
  std::set<std::string> explicitly_shared_;
  std::map<std::string, std::vector<int>> implicit_users_;  // allocation -> comm slots
  int depth_ = 0;  // bodies being emitted: 1 at the top level
  int current_group_ = -1;
};

}  // namespace

Plan lower(const Program& program, const LowerOptions& options) {
  HIR_CHECK(options.world >= 1, "world size must be at least 1, got {}", options.world);
  return Lowerer(program, options).run();
}

}  // namespace hir
