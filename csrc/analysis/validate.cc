// Static validation of a Program (see validate.h): the header checks and the
// main walk (Validator), with the rules of every node kind. Two walks over
// the tree: the first, in
// validate_declarations.cc, collects where every allocation, communication and
// group is declared (so messages can say "allocated later, at /body/5" and
// share_mem_handles may list communications that come later); the second
// checks every node in pre-order with the scopes it sees. Every problem
// becomes one Issue; one ValidationError carries them all.
//
// Rules that are deliberately simple (the cross-rank schedule check, which
// runs the lowered plan per rank, catches what they let through):
// - A wait may name any communication or group that appears earlier in the
//   pre-order walk, wherever it is (even in the other branch of an if), or
//   later in the body of a loop around the wait.
// - A deallocate inside a nested body ends the allocation only for the rest
//   of that body; nodes after the nested body still see it.
#include "analysis/validate.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/expr.h>

#include "analysis/validate_declarations.h"
#include "analysis/validate_fields.h"
#include "common/check.h"
#include "common/overloaded.h"
#include "common/text.h"
#include "ir/team.h"


namespace hir {
namespace {

using Issue = ValidationError::Issue;

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// Second walk: every rule, in pre-order, with scopes.
class Validator {
 public:
  Validator(const Program& program, const ValidateOptions& options, const Declarations& decl,
            std::vector<Issue>& issues)
      : program_(program), options_(options), decl_(decl), issues_(issues) {}

  void run() {
    walk(program_.body, "", "body");
    checkBindables(program_.inputs, "inputs");
    checkBindables(program_.outputs, "outputs");
  }

  // ---------------------------------------------------------------- nodes
  void operator()(const Allocate& a) {
    for (std::size_t i = 0; i < a.shape.size(); ++i)
      checkExpr(a.shape[i], childPath(path_, "shape", i));
    // A duplicate allocate was reported by the collector; only the first
    // declaration defines the name.
    if (decl_.allocs.at(a.name).path != path_) return;
    scopes_.back().allocated.insert(a.name);
    allocated_.insert(a.name);
  }

  void operator()(const Deallocate& d) {
    std::string where;
    Liveness live = liveness(d.name, where);
    if (live != Liveness::Live) {
      issue(fieldPath(path_, "name"), deadMessage(d.name, live, where, /*dealloc=*/true));
      return;
    }
    scopes_.back().deallocated[d.name] = path_;
  }

  void operator()(const Communication& c) {
    posted_.insert(c.name);
    if (group_) group_->members.push_back({c.name, c.backend, path_});
    checkCommFields(c, path_, issues_);
    if (c.input) checkRef(*c.input, fieldPath(path_, "input"));
    if (c.output) checkRef(*c.output, fieldPath(path_, "output"));
    if (c.tensor) checkRef(*c.tensor, fieldPath(path_, "tensor"));
    if (c.peer) checkExpr(*c.peer, fieldPath(path_, "peer"));
    if (c.root) checkExpr(*c.root, fieldPath(path_, "root"));
    checkTeam(c);
    if (!isPointToPoint(c.type) && c.input && c.output)
      checkSameDType(toString(c.type), *c.input, *c.output, fieldPath(path_, "output"));
    checkBackend(c);
  }

  void operator()(const ShareMemHandles& s) {
    std::set<std::string> seen;
    for (std::size_t i = 0; i < s.communications.size(); ++i) {
      const std::string& name = s.communications[i];
      std::string at = childPath(path_, "communications", i);
      if (!seen.insert(name).second) {
        issue(at, fmt::format("'{}' is listed twice", name));
        continue;
      }
      auto it = decl_.comms.find(name);
      if (it == decl_.comms.end()) {
        issue(at, fmt::format("'{}' is not a communication of the program", name));
      } else if (const BackendCaps* b = findCaps(options_.backends, it->second.backend);
                 b == nullptr || !b->maps_peer_memory) {
        issue(at, fmt::format("'{}' ({}) uses backend '{}'; share_mem_handles lists only "
                              "communications on a backend that maps peer memory ({})",
                              name, it->second.path, it->second.backend, peerMappingBackends()));
      }
    }
  }

  // A wait names what was posted before it, or what is posted later in the
  // body of a loop around it: then it waits for the post of an earlier
  // iteration (software pipelining; the cross-rank check reports a wait that
  // runs before any post, with its loop indices).
  void operator()(const Wait& w) {
    if (posted_.count(w.communication)) return;
    const std::string* later = nullptr;
    if (auto it = decl_.comms.find(w.communication); it != decl_.comms.end())
      later = &it->second.path;
    else if (auto g = decl_.groups.find(w.communication); g != decl_.groups.end())
      later = &g->second;
    if (later != nullptr)
      for (const Loop& l : loops_)
        if (later->starts_with(l.path + "/")) return;
    issue(fieldPath(path_, "communication"),
          fmt::format("wait on '{}', which is not a communication or group posted before this "
                      "node{}",
                      w.communication,
                      later ? fmt::format(" (it is posted later, at {}, outside every loop around "
                                          "this wait: only a loop's later posts can be waited "
                                          "for, from its next iterations)",
                                          *later)
                            : ""));
  }

  void operator()(const ForLoop& f) {
    // start, stop and step are evaluated outside the loop: the index is not
    // in scope yet.
    checkExpr(f.start, fieldPath(path_, "start"));
    checkExpr(f.stop, fieldPath(path_, "stop"));
    checkExpr(f.step, fieldPath(path_, "step"));
    if (!f.step.empty())
      if (auto step = f.step.constant(); step && *step <= 0)
        issue(fieldPath(path_, "step"),
              fmt::format("a loop step must be positive; found {}", *step));
    checkLoopIndex(f.index);
    loops_.push_back({f.index, path_});
    walk(f.body, path_, "body");
    loops_.pop_back();
  }

  void operator()(const If& i) {
    checkExpr(i.cond, fieldPath(path_, "cond"));
    walk(i.then_body, path_, "then");
    walk(i.else_body, path_, "else");
  }

  void operator()(const SetStream& s) { checkStream(s.stream); }
  void operator()(const SyncStream& s) { checkStream(s.stream); }

  void operator()(const Group& g) {
    if (group_)
      issue(path_, fmt::format("group '{}' is nested in group '{}' ({}); groups do not nest",
                               g.name, group_->name, group_->path));
    posted_.insert(g.name);
    std::optional<GroupState> outer = std::move(group_);
    group_ = GroupState{g.name, path_, {}};
    walk(g.body, path_, "body");
    checkGroupBackends(*group_);
    group_ = std::move(outer);
  }

  // The linear pattern (value, step) or the random one, not both.
  void operator()(const Fill& f) {
    checkRef(f.tensor, fieldPath(path_, "tensor"));
    if (!checkPatternOrOther("fill", f.value, f.step, f.random.has_value(), "random")) return;
    if (!f.random) return;
    const std::string at = fieldPath(path_, "random");
    checkExpr(f.random->seed, fieldPath(at, "seed"));
    checkReal(f.random->low, fieldPath(at, "low"));
    checkReal(f.random->high, fieldPath(at, "high"));
    const Real &lo = f.random->low, &hi = f.random->high;
    if (!lo.isExpr() && !hi.isExpr() && !(lo.number < hi.number))
      issue(fieldPath(at, "high"), fmt::format("a random fill needs low < high; found [{}, {})",
                                               lo.number, hi.number));
    if (auto t = refDType(f.tensor); t && !isFloating(*t))
      for (const auto& [r, field] : {std::pair{&lo, "low"}, std::pair{&hi, "high"}})
        if (!r->isExpr() && r->number != std::floor(r->number))
          issue(fieldPath(at, field),
                fmt::format("'{}' is {}: a random fill of integers takes whole bounds; found {}",
                            f.tensor.str(), toString(*t), r->number));
  }

  void operator()(const Copy& c) {
    checkRef(c.src, fieldPath(path_, "src"));
    checkRef(c.dst, fieldPath(path_, "dst"));
    checkSameDType("copy", c.src, c.dst, fieldPath(path_, "dst"));
  }

  // Against the pattern (value, step) or a tensor, not both; atol or its
  // older name tolerance, not both.
  void operator()(const Check& c) {
    checkRef(c.tensor, fieldPath(path_, "tensor"));
    if (checkPatternOrOther("check", c.value, c.step, c.expected.has_value(), "expected") &&
        c.expected)
      checkRef(*c.expected, fieldPath(path_, "expected"));
    checkReal(c.rtol, fieldPath(path_, "rtol"));
    checkReal(c.atol, fieldPath(path_, "atol"));
    if (!(c.tolerance >= 0.0) || std::isinf(c.tolerance))
      issue(fieldPath(path_, "tolerance"),
            fmt::format("tolerance must be a finite number >= 0; found {}", c.tolerance));
    if (c.tolerance != 0 && (c.atol.isExpr() || c.atol.number != 0))
      issue(fieldPath(path_, "tolerance"),
            "a check takes atol or tolerance (its older name), not both: keep atol");
  }

  // relu, gelu, silu and scale: one floating dtype in and out; cast: any.
  template <UnaryOp Op>
  void operator()(const Elementwise<Op>& e) {
    checkRef(e.input, fieldPath(path_, "input"));
    checkRef(e.output, fieldPath(path_, "output"));
    if constexpr (Op == UnaryOp::Scale) checkReal(e.factor, fieldPath(path_, "factor"));
    if constexpr (Op != UnaryOp::Cast) {
      if (auto t = refDType(e.input); t && !isFloating(*t))
        issue(fieldPath(path_, "input"),
              fmt::format("{} runs on float32, float64, float16 or bfloat16; '{}' is {} (cast "
                          "it first)",
                          toString(Op), e.input.str(), toString(*t)));
      checkSameDType(std::string(toString(Op)), e.input, e.output, fieldPath(path_, "output"));
    }
  }

  // 2-D operands of one floating dtype; the sizes are checked per rank by
  // the cross-rank check (they may depend on rank and loop indices).
  void operator()(const Matmul& m) {
    const std::pair<const TensorRef*, const char*> operands[] = {
        {&m.a, "a"}, {&m.b, "b"}, {&m.out, "out"}};
    for (const auto& [r, field] : operands) {
      const std::string at = fieldPath(path_, field);
      checkRef(*r, at);
      if (auto dims = refDims(*r); dims && *dims != 2)
        issue(at, fmt::format("matmul needs a 2-D '{}': '{}' is {}-D", field, r->str(), *dims));
      if (auto t = refDType(*r);
          t && *t != DType::Float32 && *t != DType::Float16 && *t != DType::BFloat16)
        issue(at, fmt::format("matmul runs on float32, float16 or bfloat16; '{}' is {}", r->str(),
                              toString(*t)));
    }
    checkSameDType("matmul", m.a, m.b, fieldPath(path_, "b"));
    checkSameDType("matmul", m.a, m.out, fieldPath(path_, "out"));
  }

  void operator()(const Add& a) {
    checkRef(a.a, fieldPath(path_, "a"));
    checkRef(a.b, fieldPath(path_, "b"));
    checkRef(a.out, fieldPath(path_, "out"));
    checkSameDType("add", a.a, a.b, fieldPath(path_, "b"));
    checkSameDType("add", a.a, a.out, fieldPath(path_, "out"));
  }

  void operator()(const Kernel& k) {
    if (std::find(options_.kernels.begin(), options_.kernels.end(), k.name) ==
        options_.kernels.end())
      issue(fieldPath(path_, "name"),
            fmt::format("no kernel named '{}' is registered{}", k.name,
                        options_.kernels.empty()
                            ? std::string(" (none is: register kernels through the C++ API or "
                                          "load a plugin with --plugin)")
                            : fmt::format("; registered: {}", joinNames(options_.kernels))));
    for (std::size_t i = 0; i < k.reads.size(); ++i)
      checkRef(k.reads[i], childPath(path_, "reads", i));
    for (std::size_t i = 0; i < k.writes.size(); ++i)
      checkRef(k.writes[i], childPath(path_, "writes", i));
    if (k.reads.size() + k.writes.size() > static_cast<std::size_t>(kMaxKernelTensors))
      issue(path_, fmt::format("a kernel takes at most {} reads and writes; found {}",
                               kMaxKernelTensors, k.reads.size() + k.writes.size()));
    for (const auto& [name, e] : k.args) checkExpr(e, fieldPath(fieldPath(path_, "args"), name));
  }

 private:
  // A fill's or check's pattern (value, step) or its alternative (`other`,
  // named `field`): exactly one. False when neither or both are given.
  bool checkPatternOrOther(std::string_view node, const Expr& value, const Expr& step,
                           bool other, std::string_view field) {
    const bool pattern = !value.empty();
    if (pattern == other) {
      issue(path_, pattern ? fmt::format("a {} takes 'value' or '{}', not both", node, field)
                           : fmt::format("a {} needs 'value' (the pattern value + step * k) or "
                                         "'{}'",
                                         node, field));
      return false;
    }
    if (pattern) {
      checkExpr(value, fieldPath(path_, "value"));
      checkExpr(step, fieldPath(path_, "step"));
    } else if (!(step == Expr(int64_t{0}))) {
      issue(fieldPath(path_, "step"),
            fmt::format("'step' belongs to the pattern; a {} with '{}' takes none", node, field));
    }
    return true;
  }

  void checkReal(const Real& r, const std::string& at) {
    if (r.isExpr()) checkExpr(r.expr, at);
  }

  // What the declarations say of a reference, when its allocation is known.
  std::optional<std::size_t> refDims(const TensorRef& r) const {
    auto decl = decl_.allocs.find(r.name);
    if (decl == decl_.allocs.end()) return std::nullopt;
    const std::size_t selects = r.select.size();
    return decl->second.dims >= selects ? std::optional(decl->second.dims - selects) : std::nullopt;
  }
  std::optional<DType> refDType(const TensorRef& r) const {
    auto decl = decl_.allocs.find(r.name);
    if (decl == decl_.allocs.end()) return std::nullopt;
    return decl->second.dtype;
  }

  // Allocations made and ended in one body; a body's scope ends with it.
  struct Scope {
    std::set<std::string> allocated;
    std::map<std::string, std::string> deallocated;  // name -> deallocate path
  };
  struct Loop {
    std::string index;
    std::string path;
  };
  struct GroupMember {
    std::string name, backend, path;
  };
  struct GroupState {
    std::string name, path;
    std::vector<GroupMember> members;
  };
  enum class Liveness { Live, Unknown, NotYet, NotEnclosing, Deallocated };

  void issue(std::string path, std::string message) {
    issues_.push_back({std::move(path), std::move(message)});
  }

  // `parent` is a copy: it is often path_, which changes below.
  void walk(const Body& body, const std::string parent, std::string_view field) {
    std::string saved = path_;
    scopes_.emplace_back();
    for (std::size_t i = 0; i < body.size(); ++i) {
      path_ = childPath(parent, field, i);
      checkGroupable(body[i]);
      std::visit(*this, body[i].v);
    }
    scopes_.pop_back();
    path_ = saved;
  }

  // A group posts its communications as one unit: only communications, and
  // for/if that produce them, belong in it. (Nested groups: see Group.)
  // Every kind is listed: a new node kind must say whether it may be grouped.
  void checkGroupable(const Node& n) {
    if (!group_) return;
    const bool groupable = std::visit(Overloaded{
                                          [](const Allocate&) { return false; },
                                          [](const Deallocate&) { return false; },
                                          [](const Communication&) { return true; },
                                          [](const ShareMemHandles&) { return false; },
                                          [](const Wait&) { return false; },
                                          [](const ForLoop&) { return true; },
                                          [](const If&) { return true; },
                                          [](const SetStream&) { return false; },
                                          [](const SyncStream&) { return false; },
                                          [](const Group&) { return true; },
                                          [](const Fill&) { return false; },
                                          [](const Copy&) { return false; },
                                          [](const Check&) { return false; },
                                          [](const Matmul&) { return false; },
                                          [](const Add&) { return false; },
                                          []<UnaryOp Op>(const Elementwise<Op>&) {
                                            return false;
                                          },
                                          [](const Kernel&) { return false; },
                                      },
                                      n.v);
    if (!groupable)
      issue(path_, fmt::format("a group holds communications (and for/if around them), not '{}'",
                               n.op()));
  }

  void checkGroupBackends(const GroupState& g) {
    const GroupMember* first = nullptr;
    for (const GroupMember& m : g.members) {
      if (m.backend == "auto") continue;
      if (!first) {
        first = &m;
      } else if (m.backend != first->backend) {
        issue(fieldPath(m.path, "backend"),
              fmt::format("group '{}' mixes backends: '{}' uses '{}' but '{}' ({}) uses '{}'; a "
                          "group is posted as one unit on one backend",
                          g.name, m.name, m.backend, first->name, first->path, first->backend));
      }
    }
  }

  // ----------------------------------------------------------- expressions
  bool isParam(std::string_view name) const {
    for (const Param& p : program_.params)
      if (p.name == name) return true;
    return false;
  }
  const Loop* findLoop(std::string_view name) const {
    for (auto it = loops_.rbegin(); it != loops_.rend(); ++it)
      if (it->index == name) return &*it;
    return nullptr;
  }
  bool isKnownScalar(std::string_view name) const {
    return name == "rank" || name == "world" || isParam(name) || findLoop(name);
  }
  std::string knownScalars(bool in_team) const {
    std::vector<std::string> names;
    if (!in_team) names.push_back("rank");
    names.push_back("world");
    for (const Param& p : program_.params) names.push_back(p.name);
    if (!in_team)
      for (const Loop& l : loops_) names.push_back(l.index);
    return joinNames(names);
  }

  // Each unknown name is reported once per expression.
  void checkExpr(const Expr& e, const std::string& at) {
    if (e.empty()) {
      issue(at, "expected an expression, found none");
      return;
    }
    std::vector<std::string> names;
    e.names(names);
    std::set<std::string> reported;
    for (const std::string& n : names)
      if (!isKnownScalar(n) && reported.insert(n).second)
        issue(at, fmt::format("unknown name '{}' in expression '{}' (known: {})", n, e.str(),
                              knownScalars(false)));
  }

  void checkStream(const Expr& stream) {
    std::string at = fieldPath(path_, "stream");
    checkExpr(stream, at);
    if (stream.empty()) return;
    if (auto k = stream.constant(); k && (*k < 0 || *k >= kMaxStreams))
      issue(at, fmt::format("stream {} is outside [0, {})", *k, kMaxStreams));
  }

  void checkLoopIndex(const std::string& index) {
    std::string at = fieldPath(path_, "index");
    if (!isIdentifier(index)) {
      issue(at, fmt::format("a loop index is an identifier (a letter or '_', then letters, "
                            "digits or '_'); found '{}'",
                            index));
    } else if (index == "min" || index == "max") {
      issue(at,
            fmt::format("'{}' is a function of the expression language, not a loop index", index));
    } else if (index == "rank" || index == "world") {
      issue(at, fmt::format("loop index '{}' shadows the predefined '{}'", index, index));
    } else if (isParam(index)) {
      issue(at, fmt::format("loop index '{}' shadows the param '{}'", index, index));
    } else if (const Loop* outer = findLoop(index)) {
      issue(at, fmt::format("loop index '{}' shadows the index of the enclosing loop at {}", index,
                            outer->path));
    }
  }

  // ---------------------------------------------------------------- teams
  // Teams are fixed at load: their ranks may use world and params only.
  void checkTeam(const Communication& c) {
    if (c.team.all) return;
    if (c.team.ranks.empty()) {
      issue(fieldPath(path_, "team"), "a team needs at least one rank");
      return;
    }
    const std::vector<TeamMember> members = evaluateTeam(c.team, options_.world, program_.params);
    for (std::size_t i = 0; i < c.team.ranks.size(); ++i) {
      std::string at = childPath(path_, "team", i);
      if (!checkTeamExpr(c.team.ranks[i], at) || members[i].problem.empty()) continue;
      const int earlier = members[i].repeats;
      issue(at, earlier < 0 ? members[i].problem
                            : fmt::format("{} (at {})", members[i].problem,
                                          childPath(path_, "team", earlier)));
    }
  }

  bool checkTeamExpr(const Expr& e, const std::string& at) {
    if (e.empty()) {
      issue(at, "expected an expression, found none");
      return false;
    }
    std::vector<std::string> names;
    e.names(names);
    std::set<std::string> reported;
    bool ok = true;
    for (const std::string& n : names) {
      if (n == "world" || isParam(n) || !reported.insert(n).second) continue;
      ok = false;
      if (n == "rank")
        issue(at, "teams are fixed at load: 'rank' cannot appear in a team");
      else if (findLoop(n))
        issue(at,
              fmt::format("teams are fixed at load: loop index '{}' cannot appear in a team", n));
      else
        issue(at, fmt::format("unknown name '{}' in expression '{}' (known in a team: {})", n,
                              e.str(), knownScalars(true)));
    }
    return ok;
  }

  // ------------------------------------------------------- communications
  // The backend is "auto" or one of the catalog, and takes the fields given
  // (a protocol). With "auto", lowering checks the fields against the
  // backend it picks.
  void checkBackend(const Communication& c) {
    if (c.protocol != Protocol::Auto && !isPointToPoint(c.type))
      issue(fieldPath(path_, "protocol"),
            fmt::format("protocol '{}' applies only to send/recv; found {}", toString(c.protocol),
                        toString(c.type)));
    if (c.backend == "auto") return;
    const BackendCaps* b = findCaps(options_.backends, c.backend);
    if (b == nullptr) {
      std::string names;
      for (const BackendCaps& caps : options_.backends)
        names += fmt::format(", \"{}\"", caps.name);
      issue(fieldPath(path_, "backend"),
            fmt::format("unknown backend '{}'; expected \"auto\"{}", c.backend, names));
      return;
    }
    if (c.protocol != Protocol::Auto && !b->protocols.has(c.protocol))
      issue(fieldPath(path_, "protocol"), fmt::format("backend '{}' takes no protocol '{}'",
                                                      c.backend, toString(c.protocol)));
  }

  std::string peerMappingBackends() const {
    std::string out;
    for (const BackendCaps& caps : options_.backends)
      if (caps.maps_peer_memory) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", caps.name);
    return out.empty() ? std::string("none is registered") : out;
  }

  // --------------------------------------------------------------- tensors
  // Whether `name` may be used here; `where` gets the path that explains why
  // not (the allocate or deallocate).
  Liveness liveness(const std::string& name, std::string& where) const {
    auto decl = decl_.allocs.find(name);
    if (decl == decl_.allocs.end()) return Liveness::Unknown;
    for (const Scope& s : scopes_)
      if (auto d = s.deallocated.find(name); d != s.deallocated.end()) {
        where = d->second;
        return Liveness::Deallocated;
      }
    for (const Scope& s : scopes_)
      if (s.allocated.count(name)) return Liveness::Live;
    where = decl->second.path;
    return allocated_.count(name) ? Liveness::NotEnclosing : Liveness::NotYet;
  }

  std::string deadMessage(const std::string& name, Liveness live, const std::string& where,
                          bool dealloc) const {
    const char* verb = dealloc ? "deallocated" : "used";
    switch (live) {
      case Liveness::Unknown: {
        std::vector<std::string> names = decl_.alloc_order;
        return fmt::format("'{}' names no allocation of the program (allocations: {})", name,
                           names.empty() ? std::string("none") : joinNames(names));
      }
      case Liveness::NotYet:
        return fmt::format("'{}' is {} before its allocate at {}", name, verb, where);
      case Liveness::NotEnclosing:
        return fmt::format("'{}' is allocated at {}, in a body that does not enclose this node",
                           name, where);
      case Liveness::Deallocated:
        if (dealloc) return fmt::format("'{}' is deallocated twice (first at {})", name, where);
        return fmt::format("'{}' is used after its deallocate at {}", name, where);
      case Liveness::Live:
        break;
    }
    HIR_INTERNAL_ASSERT(false, "deadMessage for a live tensor '{}'", name);
  }

  void checkRef(const TensorRef& r, const std::string& at) {
    if (r.empty()) {
      issue(at, "expected a tensor reference, found none");
      return;
    }
    std::string where;
    Liveness live = liveness(r.name, where);
    if (live != Liveness::Live) {
      std::string message = deadMessage(r.name, live, where, /*dealloc=*/false);
      if (r.str() != r.name) message = fmt::format("in '{}': {}", r.str(), message);
      issue(at, std::move(message));
    }
    if (auto decl = decl_.allocs.find(r.name); decl != decl_.allocs.end()) {
      std::size_t used = r.select.size() + (r.range ? 1 : 0);
      if (used > decl->second.dims)
        issue(at, fmt::format("'{}' indexes {} dimensions, but '{}' has {} ({})", r.str(), used,
                              r.name, decl->second.dims, decl->second.path));
    }
    for (const Expr& e : r.select) checkExpr(e, at);
    if (r.range) {
      checkExpr(r.range->first, at);
      checkExpr(r.range->second, at);
    }
  }

  // `what` is "copy" or a collective type; `at` the field to blame (dst).
  void checkSameDType(std::string_view what, const TensorRef& from, const TensorRef& to,
                      const std::string& at) {
    auto a = decl_.allocs.find(from.name), b = decl_.allocs.find(to.name);
    if (a == decl_.allocs.end() || b == decl_.allocs.end()) return;
    if (a->second.dtype == b->second.dtype) return;
    issue(at,
          fmt::format("{} from {} '{}' to {} '{}': both need the same dtype", what,
                      toString(a->second.dtype), from.str(), toString(b->second.dtype), to.str()));
  }

  void checkBindables(const std::vector<std::string>& names, std::string_view field) {
    std::set<std::string> seen;
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::string at = childPath("", field, i);
      if (!seen.insert(names[i]).second)
        issue(at, fmt::format("'{}' is listed twice", names[i]));
      else if (!decl_.allocs.count(names[i]))
        issue(at, deadMessage(names[i], Liveness::Unknown, "", false));
    }
  }

  const Program& program_;
  const ValidateOptions& options_;
  const Declarations& decl_;
  std::vector<Issue>& issues_;

  std::string path_;                 // the node being checked
  std::vector<Scope> scopes_;        // one per body on the way down
  std::vector<Loop> loops_;          // loop indices in scope, outer first
  std::set<std::string> posted_;     // communications and groups seen so far
  std::set<std::string> allocated_;  // allocations seen so far (any body)
  std::optional<GroupState> group_;  // the group being walked
};

void checkHeader(const Program& program, const ValidateOptions& options,
                 std::vector<Issue>& issues) {
  if (program.world_size && *program.world_size != options.world)
    issues.push_back({"/world_size", fmt::format("the program needs world size {}; it is run "
                                                 "with {}",
                                                 *program.world_size, options.world)});
  if (program.min_world_size && options.world < *program.min_world_size)
    issues.push_back({"/min_world_size",
                      fmt::format("the program needs at least {} ranks; it is run with {}",
                                  *program.min_world_size, options.world)});
  if (auto error = textError("a program name", program.name))
    issues.push_back({"/name", std::move(*error)});
  std::set<std::string> seen;
  for (const Param& p : program.params) {
    std::string at = fieldPath("/params", p.name);
    if (!seen.insert(p.name).second)
      issues.push_back({at, fmt::format("param '{}' is declared twice", p.name)});
    else if (p.name == "rank" || p.name == "world")
      issues.push_back(
          {at, fmt::format("'{}' is predefined; a param cannot be named '{}'", p.name, p.name)});
    else if (!isIdentifier(p.name))
      issues.push_back({at, fmt::format("a param name is an identifier; found {}", quotedText(p.name))});
  }
}

}  // namespace

void validate(const Program& program, const ValidateOptions& options) {
  std::vector<Issue> issues;
  checkHeader(program, options, issues);
  Declarations decl = collectDeclarations(program.body, issues);
  if (!decl.bad_enum) Validator(program, options, decl, issues).run();
  if (!issues.empty()) throw ValidationError(std::move(issues));
}

}  // namespace hir