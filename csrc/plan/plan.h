// A Plan is a Program lowered for execution: names resolved to slots,
// expressions compiled, loops and ifs turned into jumps, teams collected,
// backends bound, share_mem_handles placed. It is rank-independent: the rank
// is scalar slot kRankSlot, set by whoever runs the plan.
//
// One core steps through a Plan (plan/step.h): control flow, reference
// resolution, element counts, and what each instruction reads and writes
// (its accesses(), declared below beside the instruction). The evaluator
// (runtime/) runs a Plan through it on a device; the cross-rank check
// (analysis/schedule_check.h) runs it "dry" through the same core for every
// rank, with no device, to find mismatches before anything runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <hostir/backend.h>
#include <hostir/expr.h>
#include <hostir/program.h>
#include <hostir/types.h>

namespace hir {

inline constexpr int kRankSlot = 0;
inline constexpr int kWorldSlot = 1;

struct Plan;

// How an instruction touches a buffer (for hazards, dependencies and the
// allocation cache).
enum class Access : uint8_t { Read, Write };

// What an instruction's write may share with its reads, declared beside its
// accesses (Op::aliasing) and enforced by one rule for every instruction
// (plan/step.h: checkAliasing):
// - Free: nothing to check here (one access, or rules of the node's own,
//   as a communication's in-place layouts);
// - ElementWise: element i of the output depends on element i of each
//   input only, so an output may be exactly an input (in place) or apart
//   from it; a partial overlap would make the result depend on the order
//   in which elements are written;
// - Apart: an output element depends on many input elements (matmul), so
//   an output may not overlap any input at all.
enum class Aliasing : uint8_t { Free, ElementWise, Apart };

// A tensor reference with compiled indices.
struct PlanRef {
  int alloc = -1;                        // allocation slot
  std::vector<CompiledExpr> select;
  bool has_range = false;
  CompiledExpr range_begin, range_end;
  std::string text;                      // as written, for messages
};

struct PlanAlloc {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<CompiledExpr> shape;
  int node = -1;                 // the Allocate node (for its path)
  bool bindable = false;         // listed in inputs or outputs
  bool peer_mapped = false;      // used by a communication whose backend maps peer memory
};

struct PlanComm {
  std::string name;
  int node = -1;
  CommType type = CommType::Allreduce;
  ReduceOp reduce = ReduceOp::Sum;
  std::optional<PlanRef> input, output;  // collectives; send: input; recv: output
  std::optional<CompiledExpr> peer, root;
  int team = 0;       // index into Plan::teams
  int backend = 0;    // index into Plan::backends
  Protocol protocol = Protocol::Auto;
  int group = -1;     // enclosing group, or -1
  // Send/recv whose bound backend cannot reach a peer on another node (ipc):
  // why, as the backend says it. Empty: any peer will do.
  std::string cross_node_why;

  // The reference the communication moves data of (its input, else its
  // output): its dtype is the communication's.
  const PlanRef& anyRef() const { return input ? *input : *output; }
};

// A backend bound by lowering, with what the run needs to know of it.
struct PlanBackend {
  std::string name;
  bool maps_peer_memory = false;  // BackendCaps::maps_peer_memory
  PostOrder post_order = PostOrder::kFree;  // BackendCaps::post_order
  bool capturable = false;                  // BackendCaps::capturable
  bool symmetric_memory = false;            // BackendCaps::symmetric_memory
  CollectiveMessagesFn collective_messages = nullptr;  // BackendCaps::collective_messages
  ResolveProtocolFn resolve_protocol = nullptr;        // BackendCaps::resolve_protocol
  Settings settings;  // the compile's (CompileOptions::settings), which both of those read
  // The protocol a send/recv of `bytes` with `asked` runs (auto resolved);
  // may throw ProgramError (ResolveProtocolFn).
  Protocol protocolFor(Protocol asked, std::size_t bytes) const {
    if (resolve_protocol != nullptr) return resolve_protocol(settings, asked, bytes);
    return asked == Protocol::Auto ? Protocol::Put : asked;
  }
  // A collective's messages (CollectiveMessagesFn); needs collective_messages.
  std::string_view collectiveMessages(const CollectiveShape& shape,
                                      std::vector<CollectiveMessage>& out) const {
    return collective_messages(shape, settings, out);
  }
};

struct PlanGroup {
  std::string name;
  int node = -1;
  int backend = -1;   // every communication of a group uses one backend
};

struct PlanTeam {
  std::vector<int> ranks;  // world ranks in team order; team 0 is the world
};

struct PlanCheck {
  int node = -1;
  std::string tensor;  // the reference as written
};

// Static information about each IR node, for messages: its path and the
// loop index slots in scope (to print "i=2, j=0").
struct PlanNode {
  std::string path;
  std::vector<int> loop_slots;
};

// Instructions. `node` (in Instr) names the IR node each comes from. Each
// declares the buffers it reads and writes in accesses(plan, f), which calls
// f(const PlanRef&, Access) once per buffer in a fixed order: the cross-rank
// check's hazard rules and the evaluator's bookkeeping both take them from
// there (plan/step.h: forEachAccess), so neither can miss an instruction's
// effect. An instruction without accesses() does not compile.
namespace instr {
#define HIR_NO_ACCESSES                              \
  static constexpr Aliasing aliasing = Aliasing::Free; \
  template <class F>                                 \
  void accesses(const Plan&, F&&) const {}

// Lifetime, not data: an allocate or deallocate touches no element.
struct Allocate { int alloc; HIR_NO_ACCESSES };
struct Deallocate { int alloc; HIR_NO_ACCESSES };
// Reads the input (a send's tensor), writes the output (a recv's tensor).
// joined (Post outside a group, GroupEnd): the instructions right after it
// are stream-mode waits that cover every communication it posts, and no
// other instruction waits on them, so the current stream would block on the
// post right away anyway: the evaluator posts it with Backend::postJoined,
// which may run it on the current stream itself.
struct Post {
  int comm;
  bool joined = false;
  static constexpr Aliasing aliasing = Aliasing::Free;  // post_checks: in-place layouts
  template <class F>
  void accesses(const Plan& plan, F&& f) const;  // below Plan
};
struct GroupBegin { int group; HIR_NO_ACCESSES };                    // posts until GroupEnd are collected
struct GroupEnd { int group; bool joined = false; HIR_NO_ACCESSES }; // ... and posted as one unit
// share_mem_handles. written: a node of the program, whose buffers must be
// allocated when it runs; false: one lowering inserted before the
// outermost node (buffers allocated later are exchanged again there).
struct Share { std::vector<int> comms; bool written = false; HIR_NO_ACCESSES };
struct Wait { int comm = -1; int group = -1; WaitMode mode = WaitMode::Stream; HIR_NO_ACCESSES };
// slot = start; stop/step evaluated once into stop_slot/step_slot;
// if !(slot < stop) jump to exit.
struct LoopInit { int slot, stop_slot, step_slot; CompiledExpr start, stop, step; int exit; HIR_NO_ACCESSES };
// slot += step; if slot < stop jump to body.
struct LoopNext { int slot, stop_slot, step_slot; int body; HIR_NO_ACCESSES };
struct JumpIfZero { CompiledExpr cond; int target; HIR_NO_ACCESSES };
struct Jump { int target; HIR_NO_ACCESSES };
struct SetStream { CompiledExpr stream; HIR_NO_ACCESSES };
struct SyncStream { CompiledExpr stream; HIR_NO_ACCESSES };
// A Real of the program (program.h), compiled: the number, or the
// expression when `is_expr`.
struct CompiledReal {
  double number = 0.0;
  CompiledExpr expr;
  bool is_expr = false;
  double eval(const int64_t* slots) const {
    return is_expr ? static_cast<double>(expr.eval(slots)) : number;
  }
};

struct RandomFill {
  CompiledExpr seed;
  CompiledReal low, high;
};

struct Fill {
  PlanRef ref;
  CompiledExpr value, step;
  std::optional<RandomFill> random;  // instead of value + step * k
  static constexpr Aliasing aliasing = Aliasing::Free;
  template <class F>
  void accesses(const Plan&, F&& f) const { f(ref, Access::Write); }
};
struct Copy {
  PlanRef src, dst;
  static constexpr Aliasing aliasing = Aliasing::ElementWise;
  template <class F>
  void accesses(const Plan&, F&& f) const {
    f(src, Access::Read);
    f(dst, Access::Write);
  }
};
// Against value + step * k, or element k of `expected`; |got - e| <=
// atol + rtol * |e|.
struct Check {
  PlanRef ref;
  CompiledExpr value, step;
  std::optional<PlanRef> expected;
  CompiledReal rtol, atol;
  int check;
  static constexpr Aliasing aliasing = Aliasing::Free;
  template <class F>
  void accesses(const Plan&, F&& f) const {
    f(ref, Access::Read);
    if (expected) f(*expected, Access::Read);
  }
};
// Compute on the current stream (nodes Matmul, Add, Kernel).
struct Matmul {
  PlanRef a, b, out;
  bool transpose_a = false, transpose_b = false, accumulate = false;
  static constexpr Aliasing aliasing = Aliasing::Apart;
  template <class F>
  void accesses(const Plan&, F&& f) const {
    f(a, Access::Read);
    f(b, Access::Read);
    f(out, Access::Write);  // also read when accumulating: a write conflicts with both
  }
};
struct Add {
  PlanRef a, b, out;
  static constexpr Aliasing aliasing = Aliasing::ElementWise;
  template <class F>
  void accesses(const Plan&, F&& f) const {
    f(a, Access::Read);
    f(b, Access::Read);
    f(out, Access::Write);
  }
};
// relu, gelu, silu, scale, cast (Device::unary).
struct Unary {
  UnaryOp op;
  PlanRef in, out;
  CompiledReal factor;  // Scale
  static constexpr Aliasing aliasing = Aliasing::ElementWise;
  template <class F>
  void accesses(const Plan&, F&& f) const {
    f(in, Access::Read);
    f(out, Access::Write);
  }
};
struct Kernel {
  int kernel = -1;  // index into Plan::kernels
  std::vector<PlanRef> reads, writes;
  std::vector<std::pair<std::string, CompiledExpr>> args;  // sorted by name
  // A kernel's elements are its own business, but one that writes part of
  // what it reads depends on its own order: in place or apart only.
  static constexpr Aliasing aliasing = Aliasing::ElementWise;
  template <class F>
  void accesses(const Plan&, F&& f) const {
    for (const PlanRef& r : reads) f(r, Access::Read);
    for (const PlanRef& w : writes) f(w, Access::Write);
  }
};
#undef HIR_NO_ACCESSES
}  // namespace instr

struct Instr {
  std::variant<instr::Allocate, instr::Deallocate, instr::Post, instr::GroupBegin,
               instr::GroupEnd, instr::Share, instr::Wait, instr::LoopInit, instr::LoopNext,
               instr::JumpIfZero, instr::Jump, instr::SetStream, instr::SyncStream,
               instr::Fill, instr::Copy, instr::Check, instr::Matmul, instr::Add,
               instr::Unary, instr::Kernel>
      op;
  int node = -1;
};

// What instruction `in` is called in messages and on the timeline: the JSON
// op of the node it is lowered from ("allocate", "communication", "group",
// "for", "if", "kernel", ...; HIR_NODE_KINDS spells them). plan/plan.cc maps
// every instruction to its node kind: a new instruction does not compile
// until it has one.
std::string_view instrName(const Instr& in);

// At most this many accesses per instruction: a kernel's reads and writes
// (validation caps them), a matmul's three operands.
inline constexpr int kMaxAccesses = kMaxKernelTensors;
static_assert(kMaxAccesses >= 3);

struct Plan {
  std::string name;
  int world = 1;
  std::vector<std::string> scalar_names;  // slot -> name (loop slots: index name)
  std::vector<int64_t> scalar_init;       // initial values; rank slot is 0 here
  int globals = 2;                        // slots [0, globals): rank, world, the params
  std::vector<Instr> code;
  std::vector<PlanAlloc> allocs;
  std::vector<PlanComm> comms;
  std::vector<PlanGroup> groups;
  std::vector<PlanTeam> teams;
  std::vector<PlanCheck> checks;
  std::vector<PlanNode> nodes;
  std::vector<PlanBackend> backends;      // bound backends
  std::vector<std::string> kernels;       // kernels named by kernel nodes (hostir/kernel.h)
  std::string device;                     // device kind lowered for
};

template <class F>
void instr::Post::accesses(const Plan& plan, F&& f) const {
  const PlanComm& c = plan.comms[comm];
  if (c.input) f(*c.input, Access::Read);
  if (c.output) f(*c.output, Access::Write);
}

}  // namespace hir
