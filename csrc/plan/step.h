// The one core that steps through a Plan, shared by the cross-rank dry run
// (analysis/schedule_check) and the evaluator (runtime/): what the check
// simulates is then what the run does.
//
// - Control flow: step() runs loops, ifs and jumps itself (with the loop
//   counter's overflow ending the loop, never wrapping) and hands every
//   other instruction to the caller's executor, which must have an overload
//   for each: a new instruction fails to compile until every executor
//   handles it.
// - Effects: forEachAccess() gives the buffers an instruction reads and
//   writes, from the instruction's own accesses() (plan/plan.h).
// - Shapes and references: evalLayout() and resolveRef(), with every size
//   checked for overflow.
// - Communications: chunkCount() (elements per rank for each type),
//   peerRank(), rootTeamRank(); streamIndex().
// Everything evaluates with the run's arithmetic (CompiledExpr over the
// scalar slots) and throws ProgramError saying what was expected and found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <hostir/device.h>

#include "common/overloaded.h"
#include "plan/plan.h"

namespace hir {

// Calls f(const PlanRef&, Access) for every buffer `in` reads or writes.
template <class F>
void forEachAccess(const Plan& plan, const Instr& in, F&& f) {
  std::visit([&](const auto& op) { op.accesses(plan, f); }, in.op);
}

// The contiguous span a reference denotes in an allocation, in elements,
// and the shape of the tensor it denotes: `dims` extents, the first `lead`
// (the range's length when the reference has one), the others those of the
// allocation after the selected dimensions.
struct RefSpan {
  int64_t offset = 0;  // from the allocation's start
  int64_t count = 0;
  int dims = 0;
  int64_t lead = 1;
};

// The shape of an allocation as one rank holds it.
struct Layout {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, row-major
  int64_t elements = 0;
  std::size_t bytes = 0;
};

// Evaluates `alloc`'s shape into `out` (reusing its storage). Throws
// ProgramError for a negative extent or an element or byte count that does
// not fit in 63 bits.
void evalLayout(const PlanAlloc& alloc, const int64_t* scalars, Layout& out);

// The contiguous span `ref` denotes in an allocation of `layout`. Throws
// ProgramError naming the index, its value and the bound when out of range.
RefSpan resolveRef(const PlanRef& ref, const Layout& layout, const int64_t* scalars);

// Elements per rank's chunk of a communication (PostArgs::count): allgather,
// gather: the input; reduce_scatter, scatter: the output; allreduce,
// broadcast, reduce: the count; alltoall: input / team size; send: the
// input; recv: the output. Throws ProgramError saying what the type needs
// when `in` and `out` do not fit it for a team of `team_size`.
int64_t chunkCount(const PlanComm& c, int64_t team_size, int64_t in, int64_t out);

// The world rank `c` sends to or receives from; throws ProgramError when it
// is outside the world.
int peerRank(const PlanComm& c, int world, const int64_t* scalars);

// The team rank of `c`'s root; throws ProgramError when the root is not a
// member of the team.
int rootTeamRank(const PlanComm& c, const PlanTeam& team, const int64_t* scalars);

// Extent i of the tensor `ref` denotes (i < span.dims).
int64_t refExtent(const PlanRef& ref, const Layout& layout, const RefSpan& span, int i);

// The sizes of a matmul: out[m, n] (+)= op(a)[m, k] op(b)[k, n], with the
// row lengths of the stored operands. Throws ProgramError naming the
// operands and their shapes when they do not fit.
struct MatmulShape {
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldo = 0;
};
// An operand as resolved: its reference, allocation layout and span.
struct Operand {
  const PlanRef* ref;
  const Layout* layout;
  RefSpan span;
};
MatmulShape matmulShape(const instr::Matmul& mm, const Operand& a, const Operand& b,
                        const Operand& out);

// Throws ProgramError unless the operands of an add have one shape.
void checkAddShapes(const Operand& a, const Operand& b, const Operand& out);

// A random fill's pattern and a check's tolerance, evaluated now (their
// bounds may be expressions): ProgramError unless low < high (within int64
// for an integer dtype `t`) and atol, rtol >= 0.
RandomPattern randomPattern(const instr::RandomFill& r, DType t, const int64_t* scalars);
Tolerance checkTolerance(const instr::Check& c, const int64_t* scalars);

// Throws ProgramError unless `a` and `b` have the same number of elements
// (an elementwise node's input and output, a check and its expected
// tensor); `what` names the node ("relu", "check against 'e'").
void checkSameCount(std::string_view what, const Operand& a, const Operand& b);

// How `in` declares its writes may share memory with its reads.
inline Aliasing aliasingOf(const Instr& in) {
  return std::visit([](const auto& op) { return std::decay_t<decltype(op)>::aliasing; }, in.op);
}

// One access of an instruction, resolved: what it names and the elements
// it touches in its allocation.
struct ResolvedAccess {
  const PlanRef* ref = nullptr;
  Access access = Access::Read;
  int64_t offset = 0, count = 0;
};
// Throws ProgramError when a write of `in` overlaps one of its reads in a
// way its Aliasing forbids, naming both references ("'buf[1:1001]' partly
// overlaps its input 'buf[0:1000]' ...").
void checkAliasing(const Instr& in, std::span<const ResolvedAccess> accesses);

// A stream index in [0, kMaxStreams); throws ProgramError otherwise.
int streamIndex(const CompiledExpr& e, const int64_t* scalars);

// "team [0, 2, 3]", for messages.
std::string teamName(const PlanTeam& team);

// The team rank of world rank `rank`, or -1 when it is not a member.
int teamRankOf(const PlanTeam& team, int64_t rank);

// Collective `c` as world rank `rank` posts it, for a backend that runs
// collectives as messages (PlanBackend::collective_messages): `count` per
// chunkCount(), `root` a team rank, `in_place` when its input and output are
// the same span of one allocation. The cross-rank check and the evaluator
// both build it here, so both list the same messages.
CollectiveShape collectiveShape(const PlanComm& c, const PlanTeam& team, int rank, DType dtype,
                                std::size_t count, int root, bool in_place);

bool isControl(const Instr& in);

namespace detail {
int loopInit(const instr::LoopInit& l, int pc, int64_t* scalars);
int loopNext(const instr::LoopNext& l, int pc, int64_t* scalars);
}  // namespace detail

// Runs instruction `pc` and returns the next pc: control instructions here,
// every other one through exec(op, pc).
template <class Exec>
int step(const Plan& plan, int pc, int64_t* scalars, Exec& exec) {
  return std::visit(
      Overloaded{
          [&](const instr::LoopInit& l) { return detail::loopInit(l, pc, scalars); },
          [&](const instr::LoopNext& l) { return detail::loopNext(l, pc, scalars); },
          [&](const instr::JumpIfZero& j) { return j.cond.eval(scalars) == 0 ? j.target : pc + 1; },
          [&](const instr::Jump& j) { return j.target; },
          [&](const auto& op) {
            exec(op, pc);
            return pc + 1;
          },
      },
      plan.code[pc].op);
}

}  // namespace hir
