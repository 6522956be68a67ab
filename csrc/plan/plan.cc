// The instructions' names (plan.h: instrName), for the cross-rank check's
// messages (analysis/dry_run.cc) and the timeline (runtime/trace.cc).
#include "plan/plan.h"

#include "common/overloaded.h"

namespace hir {

namespace {

// The kind of node each instruction is lowered from (lower/lower.cc).
NodeKind nodeKindOf(const Instr& in) {
  using K = NodeKind;
  return std::visit(
      Overloaded{
          [](const instr::Allocate&) { return K::Allocate; },
          [](const instr::Deallocate&) { return K::Deallocate; },
          [](const instr::Post&) { return K::Communication; },
          [](const instr::GroupBegin&) { return K::Group; },
          [](const instr::GroupEnd&) { return K::Group; },
          [](const instr::Share&) { return K::ShareMemHandles; },
          [](const instr::Wait&) { return K::Wait; },
          [](const instr::LoopInit&) { return K::ForLoop; },
          [](const instr::LoopNext&) { return K::ForLoop; },
          [](const instr::JumpIfZero&) { return K::If; },
          [](const instr::Jump&) { return K::If; },
          [](const instr::SetStream&) { return K::SetStream; },
          [](const instr::SyncStream&) { return K::SyncStream; },
          [](const instr::Fill&) { return K::Fill; },
          [](const instr::Copy&) { return K::Copy; },
          [](const instr::Check&) { return K::Check; },
          [](const instr::Matmul&) { return K::Matmul; },
          [](const instr::Add&) { return K::Add; },
          [](const instr::Unary& u) {
            switch (u.op) {
              case UnaryOp::Relu: return K::Relu;
              case UnaryOp::Gelu: return K::Gelu;
              case UnaryOp::Silu: return K::Silu;
              case UnaryOp::Scale: return K::Scale;
              case UnaryOp::Cast: break;
            }
            return K::Cast;
          },
          [](const instr::Kernel&) { return K::Kernel; },
      },
      in.op);
}

}  // namespace

std::string_view instrName(const Instr& in) {
  return kNodeOpNames[static_cast<std::size_t>(nodeKindOf(in))];
}

}  // namespace hir
