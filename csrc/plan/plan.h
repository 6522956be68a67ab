// A Plan is a Program lowered for execution: names resolved to slots,
// expressions compiled, loops and ifs turned into jumps, teams collected,
// backends bound, share_mem_handles placed. It is rank-independent: the rank
// is scalar slot kRankSlot, set by whoever runs the plan.
//
// The evaluator (runtime/evaluator.h) runs a Plan on a device; the
// cross-rank checker (analysis/schedule_check.h) runs it "dry" for every
// rank, with no device, to find mismatches before anything runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <hostir/types.h>
#include <hostir/expr.h>

namespace hir {

inline constexpr int kRankSlot = 0;
inline constexpr int kWorldSlot = 1;
// Streams a program may use: set_stream/sync_stream take 0..kMaxStreams-1.
inline constexpr int kMaxStreams = 16;

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
  bool ipc_shared = false;       // used by a communication whose backend maps peer memory (ipc)
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

namespace instr {
// Instructions. `node` (in Instr) names the IR node each comes from.
struct Allocate { int alloc; };
struct Deallocate { int alloc; };
// joined (Post outside a group, GroupEnd): the instructions right after it
// are stream-mode waits that cover every communication it posts, and no
// other instruction waits on them, so the current stream would block on the
// post right away anyway: the evaluator posts it with Backend::postJoined,
// which may run it on the current stream itself.
struct Post { int comm; bool joined = false; };      // outside a group: post now
struct GroupBegin { int group; };                    // posts until GroupEnd are collected
struct GroupEnd { int group; bool joined = false; }; // ... and posted as one unit
struct Share { std::vector<int> comms; };  // share_mem_handles
struct Wait { int comm = -1; int group = -1; WaitMode mode = WaitMode::Stream; };
// slot = start; stop/step evaluated once into stop_slot/step_slot;
// if !(slot < stop) jump to exit.
struct LoopInit { int slot, stop_slot, step_slot; CompiledExpr start, stop, step; int exit; };
// slot += step; if slot < stop jump to body.
struct LoopNext { int slot, stop_slot, step_slot; int body; };
struct JumpIfZero { CompiledExpr cond; int target; };
struct Jump { int target; };
struct SetStream { CompiledExpr stream; };
struct SyncStream { CompiledExpr stream; };
struct Fill { PlanRef ref; CompiledExpr value, step; };
struct Copy { PlanRef src, dst; };
struct Check { PlanRef ref; CompiledExpr value, step; double tolerance; int check; };
}  // namespace instr

struct Instr {
  std::variant<instr::Allocate, instr::Deallocate, instr::Post, instr::GroupBegin,
               instr::GroupEnd, instr::Share, instr::Wait, instr::LoopInit, instr::LoopNext,
               instr::JumpIfZero, instr::Jump, instr::SetStream, instr::SyncStream,
               instr::Fill, instr::Copy, instr::Check>
      op;
  int node = -1;
};

struct Plan {
  std::string name;
  int world = 1;
  std::vector<std::string> scalar_names;  // slot -> name (loop slots: index name)
  std::vector<int64_t> scalar_init;       // initial values; rank slot is 0 here
  std::vector<Instr> code;
  std::vector<PlanAlloc> allocs;
  std::vector<PlanComm> comms;
  std::vector<PlanGroup> groups;
  std::vector<PlanTeam> teams;
  std::vector<PlanCheck> checks;
  std::vector<PlanNode> nodes;
  std::vector<std::string> backends;      // bound backend names
  std::string device;                     // device kind lowered for
};

}  // namespace hir
