// The Evaluator's state on one rank (Evaluator::Impl; internal to runtime/)
// and the files that act on it, each with one job:
// - evaluator.cc: loading (the compile, the backends' setup, symmetric
//   memory, the kernels), the teardown, and the public API;
// - evaluator_exec.cc: the executor of every instruction, and the loop that
//   steps through a run with the plan-stepping core (plan/step.h, shared
//   with the cross-rank check, which therefore checks what runs here);
// - evaluator_run.cc: a run's start and end, where its failures surface and
//   what the watchdog reports, synchronize(), and what graph mode asks of
//   the state.
// The parts with state of their own live beside them: alloc_cache.h (the
// memory of allocations and who used it), peer_routes.h (each message's
// peer address, exchanges), diagnostics.h (node paths, pending reports,
// check results), flight_recorder.h (the last posts), failure.h (a failure
// aborts the backends and the queued work, once), watchdog.h (the bound on
// time without progress), graph_capture.h (graph mode's capture and
// replays), trace.h (the timeline).
//
// Per-node work is integer arithmetic on the scalar slots, a few device
// calls (enqueue, record, wait) and no allocation in steady state, except the
// host device's task closures.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <hostir/backend.h>
#include <hostir/device.h>
#include <hostir/evaluator.h>
#include <hostir/kernel.h>
#include <hostir/session.h>

#include "compile/compile.h"
#include "plan/step.h"
#include "runtime/alloc_cache.h"
#include "runtime/diagnostics.h"
#include "runtime/failure.h"
#include "runtime/flight_recorder.h"
#include "runtime/graph_capture.h"
#include "runtime/peer_routes.h"
#include "runtime/run_state.h"
#include "runtime/trace.h"
#include "runtime/watchdog.h"

namespace hir {

struct Evaluator::Impl {
  using Section = Watchdog::Section;

  // The watchdog's limit inside run() and synchronize() beyond the timeout,
  // whose own waits therefore report first; and the limit of a teardown
  // after a failure, whose waits are all cut short.
  static constexpr Duration kProgressSlack{1000};
  static constexpr Duration kTeardownLimit{2000};

  // The session's state (device, settings, owned bootstrap): first, so
  // that it is destroyed last, after everything that uses the device.
  std::shared_ptr<const void> keep_session;
  // Set while a thread is inside run(), synchronize() or bind().
  std::atomic<bool> busy{false};
  Device& dev;
  Bootstrap& boot;
  EvaluatorOptions opts;
  int rank = 0;
  Failure failure;  // shared with the watchdog's thread
  // Before everything it may have to report on or abort, and destroyed
  // after it: it guards teardown to the end.
  Watchdog watchdog;
  CompiledProgram compiled;
  const Plan& plan;
  std::vector<int> team_rank;  // per team: this rank's team rank, or -1
  std::vector<int64_t> scalars;
  std::vector<CommState> comms;
  std::vector<GroupState> groups;
  EventPool events;  // done events of posts (run_state.h)
  FlightRecorder flight;  // the last posts
  uint64_t runs = 0;
  Streams streams;
  std::map<void*, std::unique_ptr<Stream>> wrapped;  // caller streams
  std::unique_ptr<Event> run_start;
  int current = 0;
  int64_t exchanges = 0;
  std::vector<int> posted_this_run;  // distinct comm slots, this run
  Diagnostics diag;
  AllocCache allocs;  // declared before the backends: freed after them
  PeerRoutes routes;
  std::vector<std::unique_ptr<Backend>> backends;
  // The buffers the current instruction accesses, in the order it declares
  // them (instr::*::accesses); and per instruction, how many it has (0: none
  // to resolve, as for control flow) and kWatched, for those the watchdog
  // sees go by (all that may block the host, and loops' back edges; not
  // the other jumps), counted once at load.
  static constexpr uint8_t kWatched = 0x80, kAccessMask = 0x7f;
  static_assert(kMaxAccesses <= kAccessMask);
  std::array<AllocCache::Span, kMaxAccesses> spans{};
  std::vector<uint8_t> pc_info;
  // Per kernel instruction: the kernel and the storage of its launches
  // (sized at load, so a launch allocates nothing).
  struct KernelCall {
    const KernelInfo* info = nullptr;
    std::vector<KernelTensor> reads, writes;
    std::vector<std::pair<std::string, int64_t>> args;
  };
  std::vector<KernelCall> kernel_calls;
  std::vector<int> kernel_call_at;  // per pc: index into kernel_calls, or -1
  std::unique_ptr<Tracer> tracer;   // options.trace: the timeline (runtime/trace.h)
  GraphCapture graph;  // options.graph (runtime/graph_capture.h)
  std::vector<std::string> symmetric;  // allocations placed by placeSymmetric()

  // ---------------------------------------------- evaluator.cc: load, teardown
  Impl(Session& s, std::shared_ptr<const void> keep, const Program& program,
       const EvaluatorOptions& o);
  // Bounded: after a failure nothing is waited for (the backends were
  // aborted and the device's queued work failed); otherwise the run's work
  // gets the timeout, and a timeout is a failure. The watchdog guards the
  // rest, members included.
  ~Impl();
  // Graph mode needs a device with graphs, and the cross-rank check's word
  // that a run can be captured and that every rank captures the same
  // communications (it compared every rank's sequence of them).
  void requireGraphMode() const;
  // EvaluatorOptions::symmetric_memory: the allocations every rank makes
  // alike and that only one symmetric-memory backend's collectives use get
  // that backend's memory now, in plan order (the same on every rank, as
  // the backend's registration with the teams needs).
  void placeSymmetric();
  // Each kernel node's registered kernel, for this device.
  void bindKernels();

  // ------------------------------------ evaluator_exec.cc: the instructions
  // Steps from `pc` to the end of the plan; on an exception `pc` is the
  // instruction that threw.
  void stepThrough(int& pc);
  // One instruction with its host span, and a span on its stream for
  // compute and stream-mode waits (posts trace themselves).
  int tracedStep(int pc);
  // Resolves what `in` reads and writes into `spans` (the same accesses the
  // cross-rank check checks), unless the instruction is skipped here.
  void resolveAccesses(const Instr& in);
  bool skips(const instr::Post& p) const { return team_rank[plan.comms[p.comm].team] < 0; }
  // Program stream k, created on first use; its first use in a run waits
  // for what the caller enqueued before run().
  Stream& stream(int k);
  // A block handed out again: the current stream waits for its earlier
  // users (joined posts have no done: the stream mask covers their stream).
  void orderAfterUsers(const AllocCache::Block& b);
  // A block about to be freed: the host waits until its users finished.
  // One deadline for all of them.
  void drainUsers(const AllocCache::Block& b);

  PostArgs makePost(int slot);
  // The latest post of `cs` has done event `event` (-1: joined, none).
  void setLastDone(CommState& cs, int event);
  // The flight recorder's entry of a post of communication `slot` with
  // arguments `p` and done event `event` (-1: joined to stream `joined`).
  void recordPost(int slot, const PostArgs& p, int event, int joined);
  void markPosted(int slot);
  // A post as a unit reached its backend: `event` its done event (-1: none,
  // joined to stream `joined_on`), still referenced by its communications.
  struct Posted {
    int event = -1;
    int joined_on = -1;
  };
  // Posts `ops`, of communications `slots` (one post, or a group's), to
  // backend `backend` as one unit: on the current stream when the plan says
  // it is waited for right away (`joined`) and the backend can. Each
  // communication then has it as its latest post.
  Posted postUnit(int pc, int backend, std::span<const PostArgs> ops, std::span<const int> slots,
                  bool joined);
  // A wait on a communication's or a group's latest post (`what`: "" or
  // "group "): none if skipped here, nothing if in stream mode on the
  // stream it joined. False when the post was skipped.
  bool waitFor(PostState state, int joined_on, Event* done, int backend, int node,
               std::string_view what, const std::string& name, WaitMode mode, Stream& cur);
  // Access i of the current instruction as the core's shape rules take it.
  Operand operand(const PlanRef& ref, int i) const {
    return Operand{&ref, &allocs[ref.alloc].layout, spans[i].ref};
  }

  // The executors of step() (plan/step.h), one per instruction.
  void operator()(const instr::Allocate& in, int pc);
  void operator()(const instr::Deallocate& in, int pc);
  void operator()(const instr::Post& in, int pc);
  void operator()(const instr::GroupBegin& in, int pc);
  void operator()(const instr::GroupEnd& in, int pc);
  void operator()(const instr::Wait& in, int pc);
  void operator()(const instr::Share& in, int pc);
  void operator()(const instr::SetStream& in, int pc);
  void operator()(const instr::SyncStream& in, int pc);
  void operator()(const instr::Fill& in, int pc);
  void operator()(const instr::Copy& in, int pc);
  void operator()(const instr::Check& in, int pc);
  void operator()(const instr::Matmul& in, int pc);
  void operator()(const instr::Add& in, int pc);
  void operator()(const instr::Unary& in, int pc);
  void operator()(const instr::Kernel& in, int pc);

  // ---------------------------- evaluator_run.cc: runs, failures, graphs
  void run(void* native);
  // Stream 0 waits for every stream and every communication of the run, so
  // the caller's stream carries all of the run's dependencies.
  void finishRun();
  void synchronize();
  // One deadline for all: a stuck run fails after `timeout`, not after a
  // timeout per stream. Communications first, through their backends (which
  // may tell a library's asynchronous error from slowness), then streams.
  void synchronizeAll();
  std::string synchronizing() const;
  // "PATH: on rank R (i=2)", where instruction `pc` runs.
  std::string here(int pc) const;
  // here(), or the end of the run (finishRun).
  std::string at(int pc) const;
  // Where the host is stuck, as the other messages say where: "PATH: on
  // rank R (i=2)", "synchronize after run 3: on rank R", ...
  std::string stuckWhere(Section s);
  // Watchdog, stage 1: the host made no progress for the timeout (plus the
  // slack) in something without a timeout of its own.
  void onStuck(Section s, Duration stuck);
  // Watchdog, stage 2: the abort did not release the host. Only ending the
  // job does (a bootstrap collective a peer never joins, a call that ignores
  // the abort).
  [[noreturn]] void endJob(Section s, Duration stuck);
  // The events recorded so far are not waited on again: communications'
  // and groups' done events, the blocks' users (before and after a
  // capture, which may not wait on events from outside it, and whose
  // events nobody may ask about).
  void forgetEvents();
  GraphCapture::Hooks graphHooks();
  // A run of a captured program.
  void replay(Stream& s0);
};

}  // namespace hir
