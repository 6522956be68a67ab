// The evaluator's interpreter: runs a compiled Plan on one rank. See
// hostir/evaluator.h for the contract and docs/architecture.md for the
// stream and event rules. Its parts, each with one job:
// - compile/compile.h: validation, lowering, the cross-rank check (load);
// - plan/step.h: control flow, shapes, references, counts (shared with the
//   cross-rank check, which therefore checks what runs here);
// - alloc_cache.h: the memory of allocations and who used it;
// - peer_routes.h: the peer's address of each message, and exchanges;
// - diagnostics.h: node paths, pending reports, check results;
// - flight_recorder.h: the last communications posted, for those reports;
// - failure.h: a failure aborts the backends and the queued work, once;
// - watchdog.h: the bound on time spent without progress;
// - graph_capture.h: graph mode's capture and replays.
//
// Per-node work is integer arithmetic on the scalar slots, a few device
// calls (enqueue, record, wait) and no allocation in steady state, except the
// host device's task closures.
//
// About 850 lines, over the usual 600: one executor per instruction, the
// run's failure paths (where each error surfaces, what the watchdog
// reports) and what a graph capture must forget all act on the one Impl
// state; what could leave it has (the failure itself, the watchdog, the
// flight recorder, the diagnostics, graph mode's state machine).
#include <hostir/evaluator.h>

#include <algorithm>
#include <array>
#include <map>

#include <hostir/backend.h>
#include <hostir/device.h>
#include <hostir/kernel.h>
#include <hostir/session.h>

#include "common/check.h"
#include "common/log.h"
#include "common/overloaded.h"
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
namespace {

using Section = Watchdog::Section;

// The watchdog's limit inside run() and synchronize() beyond the timeout,
// whose own waits therefore report first; and the limit of a teardown
// after a failure, whose waits are all cut short.
constexpr Duration kProgressSlack{1000};
constexpr Duration kTeardownLimit{2000};

CompiledProgram compileFor(Session& session, const Program& program,
                           const EvaluatorOptions& opts) {
  const CompileOptions co =
      compileOptionsFor(session.bootstrap(), session.device().kind(), opts.check_schedule);
  const auto start = std::chrono::steady_clock::now();
  CompiledProgram out = compile(program, co);
  HIR_LOG_DEBUG(Subsys::Check, "'{}' compiled for {} ranks in {:.1f} ms: {}", program.name,
                co.world,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count(),
                out.checked ? fmt::format("the cross-rank check passed ({} communications{})",
                                          out.communications,
                                          out.truncated ? ", checked in part" : "")
                            : std::string("no cross-rank check"));
  return out;
}

}  // namespace

struct Evaluator::Impl {
  Session& session;
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

  Impl(Session& s, const Program& program, const EvaluatorOptions& o)
      : session(s),
        dev(s.device()),
        boot(s.bootstrap()),
        opts(o),
        rank(boot.rank()),
        failure(dev, boot, rank),
        watchdog(Watchdog::Actions{[this](Section sec, Duration d) { onStuck(sec, d); },
                                   [this](Section sec, Duration d) { endJob(sec, d); }}),
        compiled(compileFor(s, program, o)),
        plan(compiled.plan),
        flight(plan),
        diag(plan, dev, rank),
        allocs(plan, dev,
               AllocCache::UserWaits{[this](const AllocCache::Block& b) { orderAfterUsers(b); },
                                     [this](const AllocCache::Block& b) { drainUsers(b); }}),
        routes(plan, compiled.trace, rank),
        graph(o.graph, dev, backends, diag, graphHooks()) {
    if (opts.graph) requireGraphMode();  // before any backend is set up
    for (const PlanTeam& t : plan.teams) team_rank.push_back(teamRankOf(t, rank));
    // The report before anything is aborted; from the watchdog's thread
    // (the host is stuck somewhere) without recording on streams.
    failure.setActions(Failure::Actions{
        [this](bool ask_streams) {
          return diag.pendingReport(comms, streams, ask_streams) + "\n" +
                 diag.flightReport(flight, events, streams, ask_streams);
        },
        [this] {
          for (auto& b : backends) b->abort();
        }});
    BackendContext ctx;
    ctx.device = &dev;
    ctx.bootstrap = &boot;
    ctx.timeout = opts.timeout;
    ctx.graph = opts.graph;
    for (const PlanTeam& t : plan.teams) ctx.teams.push_back(t.ranks);
    {
      // Setup is collective (communicators, node names): a peer that never
      // comes must not hold this rank for ever.
      Watchdog::Scope load(watchdog, Section::Load, opts.timeout + kProgressSlack);
      for (const PlanBackend& b : plan.backends) {
        const BackendInfo* info = findBackend(b.name);
        HIR_INTERNAL_ASSERT(info, "lowering bound unknown backend '{}'", b.name);
        ctx.largest_eager_send =
            largestEagerSend(compiled.trace, static_cast<int>(backends.size()));
        backends.push_back(info->create());
        backends.back()->setup(ctx);
        watchdog.tick(-1);
      }
      placeSymmetric();  // collective too: registration with the teams
    }
    HIR_LOG_INFO(Subsys::Eval, "loaded '{}' on {}: {} instructions, {} communications, {} "
                 "backend(s)",
                 plan.name, dev.kind(), plan.code.size(), plan.comms.size(), plan.backends.size());
    for (const PlanComm& c : plan.comms)
      HIR_LOG_DEBUG(Subsys::Eval, "'{}' ({}) at {}: backend {}", c.name, toString(c.type),
                    plan.nodes[c.node].path, plan.backends[c.backend].name);
    scalars = plan.scalar_init;
    scalars[kRankSlot] = rank;
    comms.resize(plan.comms.size());
    for (std::size_t c = 0; c < comms.size(); ++c)
      comms[c].loop_values.resize(plan.nodes[plan.comms[c].node].loop_slots.size());
    groups.resize(plan.groups.size());
    events.init(dev, comms.size() + groups.size() + FlightRecorder::kEntries + 1);
    run_start = dev.createEvent();
    bindKernels();
    for (const Instr& in : plan.code) {
      int n = 0;
      forEachAccess(plan, in, [&](const PlanRef&, Access) { ++n; });
      HIR_INTERNAL_ASSERT(n <= kMaxAccesses, "an instruction with {} accesses (at most {})", n,
                          kMaxAccesses);
      const bool jump = std::holds_alternative<instr::LoopInit>(in.op) ||
                        std::holds_alternative<instr::JumpIfZero>(in.op) ||
                        std::holds_alternative<instr::Jump>(in.op);
      pc_info.push_back(static_cast<uint8_t>(n | (jump ? 0 : kWatched)));
    }
    if (opts.trace) tracer = std::make_unique<Tracer>(dev, plan, rank, opts.timeout);
  }

  // Graph mode needs a device with graphs, and the cross-rank check's word
  // that a run can be captured and that every rank captures the same
  // communications (it compared every rank's sequence of them).
  void requireGraphMode() const {
    HIR_CHECK_AS(UsageError, !opts.trace,
                 "graph mode and tracing cannot be combined: a trace times every node of a run "
                 "on the host, and a replayed graph has no per-node host work");
    HIR_CHECK_AS(UsageError, dev.supports(DeviceFeature::Graphs),
                 "graph mode needs a device with graphs (cuda); device '{}' has none",
                 dev.kind());
    requireCapturable(compiled);
  }

  // EvaluatorOptions::symmetric_memory: the allocations every rank makes
  // alike and that only one symmetric-memory backend's collectives use get
  // that backend's memory now, in plan order (the same on every rank, as
  // the backend's registration with the teams needs).
  void placeSymmetric() {
    using S = EvaluatorOptions::Symmetric;
    if (opts.symmetric_memory == S::Off || (opts.symmetric_memory == S::Auto && !opts.graph))
      return;
    std::vector<int64_t> fixed = plan.scalar_init;
    fixed[kRankSlot] = rank;
    // Per allocation, from one pass over the communications: the one
    // symmetric-memory backend whose collectives use it (-1: none; -2: a
    // collective elsewhere too) and their teams.
    std::vector<int> backend_of(plan.allocs.size(), -1);
    std::vector<std::vector<int>> teams_of(plan.allocs.size());
    for (const PlanComm& c : plan.comms) {
      if (isPointToPoint(c.type)) continue;
      for (const std::optional<PlanRef>& ref : {c.input, c.output}) {
        if (!ref) continue;
        int& b = backend_of[static_cast<std::size_t>(ref->alloc)];
        if (b == -2) continue;
        if (!plan.backends[c.backend].symmetric_memory || (b >= 0 && b != c.backend)) {
          b = -2;
          continue;
        }
        b = c.backend;
        std::vector<int>& teams = teams_of[static_cast<std::size_t>(ref->alloc)];
        if (std::find(teams.begin(), teams.end(), c.team) == teams.end()) teams.push_back(c.team);
      }
    }
    for (std::size_t a = 0; a < plan.allocs.size(); ++a) {
      const PlanAlloc& pa = plan.allocs[a];
      const int backend = backend_of[a];
      if (backend < 0 || pa.bindable || pa.peer_mapped) continue;
      bool same_everywhere = true;  // shape of params and world only
      for (const CompiledExpr& e : pa.shape)
        for (int s : e.slots())
          if (s == kRankSlot || s >= plan.globals) same_everywhere = false;
      if (!same_everywhere) continue;
      const std::vector<int>& teams = teams_of[a];
      Layout layout;
      try {
        evalLayout(pa, fixed.data(), layout);
      } catch (const ProgramError&) {
        continue;  // the run reports it at the node
      }
      if (layout.bytes == 0) continue;
      void* p = backends[backend]->allocateSymmetric(layout.bytes, teams);
      watchdog.tick(-1);
      if (p == nullptr) continue;
      allocs.adopt(static_cast<int>(a), p, layout.bytes);
      symmetric.push_back(pa.name);
      HIR_LOG_INFO(Subsys::Eval, "'{}' ({} bytes) placed in {}'s symmetric memory", pa.name,
                   layout.bytes, plan.backends[backend].name);
    }
  }

  // Each kernel node's registered kernel, for this device.
  void bindKernels() {
    kernel_call_at.assign(plan.code.size(), -1);
    for (std::size_t pc = 0; pc < plan.code.size(); ++pc) {
      const auto* k = std::get_if<instr::Kernel>(&plan.code[pc].op);
      if (k == nullptr) continue;
      const std::string& name = plan.kernels[k->kernel];
      const KernelInfo* info = findKernel(name);
      HIR_INTERNAL_ASSERT(info != nullptr, "validation let unknown kernel '{}' through", name);
      HIR_CHECK(std::find(info->devices.begin(), info->devices.end(), dev.kind()) !=
                    info->devices.end(),
                "{}: kernel '{}' does not run on device '{}'",
                plan.nodes[plan.code[pc].node].path, name, dev.kind());
      KernelCall call;
      call.info = info;
      call.reads.resize(k->reads.size());
      call.writes.resize(k->writes.size());
      for (const auto& [arg, e] : k->args) call.args.emplace_back(arg, 0);
      kernel_call_at[pc] = static_cast<int>(kernel_calls.size());
      kernel_calls.push_back(std::move(call));
    }
  }

  // Bounded: after a failure nothing is waited for (the backends were
  // aborted and the device's queued work failed); otherwise the run's work
  // gets the timeout, and a timeout is a failure. The watchdog guards the
  // rest, members included.
  ~Impl() {
    watchdog.enter(Section::Teardown,
                   failure.failed() ? kTeardownLimit : opts.timeout + kTeardownLimit);
    failure.beginTeardown();  // after a fail() of the watchdog's under way, if any
    if (!failure.failed()) {
      try {
        synchronizeAll();
      } catch (const std::exception& e) {
        failure.fail(e.what());
      }
    }
    if (failure.failed()) {
      allocs.leak();  // a stuck transfer may still use it
      diag.leak();
    }
    watchdog.tick(-1);
    // The graph before the backends: NCCL keeps resources for the
    // operations a graph holds, and destroying a communicator waits until
    // the graphs that use it are gone. (A graph still running is freed when
    // it completes.)
    graph.release();
    // Backends first: they finish with the memory (ipc: peers are done with
    // our blocks once our own communications completed), and the streams
    // given to postJoined outlive them.
    try {
      backends.clear();
    } catch (const std::exception&) {
    }
    watchdog.tick(-1);
    tracer.reset();
  }

  // ------------------------------------------------------------ failure
  // Where the host is stuck, as the other messages say where: "PATH: on
  // rank R (i=2)", "synchronize after run 3: on rank R", ...
  std::string stuckWhere(Section s) {
    switch (s) {
      case Section::Run: {
        const int pc = watchdog.pc();
        return pc >= 0 ? here(pc) : fmt::format("run {}: on rank {}", runs, rank);
      }
      case Section::Synchronize: return synchronizing();
      case Section::Load: return fmt::format("setting up the backends: on rank {}", rank);
      case Section::Teardown: return fmt::format("the evaluator's teardown: on rank {}", rank);
      case Section::None: break;
    }
    return fmt::format("rank {}", rank);
  }

  // Watchdog, stage 1: the host made no progress for the timeout (plus the
  // slack) in something without a timeout of its own.
  void onStuck(Section s, Duration stuck) {
    if (s == Section::Teardown) return;  // teardown aborted already, or has nothing to abort
    failure.fail(fmt::format("{}: no progress for {} ms (the timeout is {} ms): the watchdog "
                             "aborted the communications",
                             stuckWhere(s), stuck.count(), opts.timeout.count()),
                 /*from_watchdog=*/true);
  }

  // Watchdog, stage 2: the abort did not release the host. Only ending the
  // job does (a bootstrap collective a peer never joins, a call that ignores
  // the abort).
  [[noreturn]] void endJob(Section s, Duration stuck) {
    failure.endJob(fmt::format("{}: no progress for {} ms", stuckWhere(s), stuck.count()));
  }

  // ------------------------------------------------------------- streams
  Stream& stream(int k) {
    StreamState& s = streams[k];
    if (!s.stream) {
      s.owned = dev.createStream();
      s.stream = s.owned.get();
    }
    if (!s.event) s.event = dev.createEvent();
    if (!s.used_this_run) {
      // A stream's first work in a run comes after what the caller enqueued
      // on its stream before run().
      if (k != 0) dev.wait(*s.stream, *run_start);
      s.used_this_run = true;
    }
    return *s.stream;
  }

  // A block handed out again: the current stream waits for its earlier
  // users (joined posts have no done: the stream mask covers their stream).
  void orderAfterUsers(const AllocCache::Block& b) {
    Stream& cur = stream(current);
    for (int c : b.comm_users)
      if (comms[c].last_done) dev.wait(cur, *comms[c].last_done);
    for (int k = 0; k < kMaxStreams; ++k) {
      if (k == current || !(b.stream_mask >> k & 1) || !streams[k].stream) continue;
      dev.record(*streams[k].event, *streams[k].stream);
      dev.wait(cur, *streams[k].event);
    }
  }

  // A block about to be freed: the host waits until its users finished.
  // One deadline for all of them.
  void drainUsers(const AllocCache::Block& b) {
    const auto start = std::chrono::steady_clock::now();
    for (int c : b.comm_users)
      if (comms[c].last_done)
        dev.synchronize(*comms[c].last_done, remainingOf(opts.timeout, start));
    for (int k = 0; k < kMaxStreams; ++k)
      if ((b.stream_mask >> k & 1) && streams[k].stream)
        dev.synchronize(*streams[k].stream, remainingOf(opts.timeout, start));
  }

  // ------------------------------------------------------ instructions
  // Resolves what `in` reads and writes into `spans` (the same accesses the
  // cross-rank check checks), unless the instruction is skipped here.
  void resolveAccesses(const Instr& in) {
    if (const auto* p = std::get_if<instr::Post>(&in.op); p && skips(*p)) return;
    int n = 0;
    forEachAccess(plan, in, [&](const PlanRef& ref, Access) {
      spans[n++] = allocs.resolve(ref, scalars.data(), current);
    });
  }

  bool skips(const instr::Post& p) const { return team_rank[plan.comms[p.comm].team] < 0; }

  void operator()(const instr::Allocate& in, int) {
    allocs.allocate(in.alloc, scalars.data(), current);
  }
  void operator()(const instr::Deallocate& in, int) { allocs.deallocate(in.alloc); }

  PostArgs makePost(int slot) {
    const PlanComm& c = plan.comms[slot];
    PostArgs p;
    p.type = c.type;
    p.dtype = plan.allocs[c.anyRef().alloc].dtype;
    p.reduce = c.reduce;
    p.team = c.team;
    p.protocol = c.protocol;
    p.comm = slot;
    p.path = plan.nodes[c.node].path.c_str();
    // The spans in the order Post declares them: input, then output.
    int next = 0;
    auto bind = [&](int& alloc, std::size_t& offset, const PlanRef& ref) {
      const AllocCache::Span& s = spans[next++];
      alloc = ref.alloc;
      offset = static_cast<std::size_t>(s.offset()) * dtypeSize(p.dtype);
      // Each communication once: a block used by one communication in a
      // loop of a million iterations keeps one entry, not a million.
      std::vector<int>& users = s.block->comm_users;
      if (std::find(users.begin(), users.end(), slot) == users.end()) users.push_back(slot);
      return std::pair<char*, int64_t>{s.data(p.dtype), s.count()};
    };
    int64_t in_count = 0, out_count = 0;
    if (c.input) std::tie(p.input, in_count) = bind(p.input_alloc, p.input_offset, *c.input);
    if (c.output) std::tie(p.output, out_count) = bind(p.output_alloc, p.output_offset, *c.output);
    const PlanTeam& team = plan.teams[c.team];
    if (c.root) p.root = rootTeamRank(c, team, scalars.data());
    if (c.peer) p.peer = peerRank(c, plan.world, scalars.data());
    p.count = static_cast<std::size_t>(chunkCount(c, team.ranks.size(), in_count, out_count));
    if (plan.backends[c.backend].maps_peer_memory && isPointToPoint(c.type))
      routes.fill(p, slot, allocs);
    else if (plan.backends[c.backend].collective_messages != nullptr)
      routes.fillCollective(p, slot, allocs);
    return p;
  }

  // The latest post of `cs` has done event `event` (-1: joined, none).
  void setLastDone(CommState& cs, int event) {
    if (event >= 0) events.ref(event);
    events.unref(cs.last_event);
    cs.last_event = event;
    cs.last_done = event >= 0 ? &events[event] : nullptr;
  }

  // The flight recorder's entry of a post of communication `slot` with
  // arguments `p` and done event `event` (-1: joined to stream `joined`).
  void recordPost(int slot, const PostArgs& p, int event, int joined) {
    if (event >= 0) events.ref(event);
    events.unref(flight.record(slot, p, {&comms[slot].loop_values, runs, current, joined, event}));
  }

  void markPosted(int slot) {
    if (comms[slot].posted_this_run) return;
    comms[slot].posted_this_run = true;
    posted_this_run.push_back(slot);
  }

  // Posts a unit: on the current stream when the plan says it is waited for
  // right away and the backend can; the stream it then ran on, or -1.
  int postUnit(Backend& b, std::span<const PostArgs> ops, Event& done, bool joined) {
    Stream& cur = stream(current);
    if (!joined) {
      b.post(ops, cur, done);
      return -1;
    }
    return b.postJoined(ops, cur, done) ? current : -1;
  }

  void operator()(const instr::Post& in, int pc) {
    const PlanComm& c = plan.comms[in.comm];
    CommState& cs = comms[in.comm];
    if (skips(in)) {  // not a member: skip the node
      cs.state = PostState::Skipped;
      return;
    }
    PostArgs p = makePost(in.comm);
    diag.loopValues(c.node, scalars.data(), cs.loop_values);
    if (c.group >= 0 && groups[c.group].collecting) {
      GroupState& g = groups[c.group];
      g.ops.push_back(p);
      g.comms.push_back(in.comm);
    } else {
      const int span = tracer ? tracer->postBegin(pc, current, stream(current)) : -1;
      const int ev = events.take();
      cs.joined_on =
          postUnit(*backends[c.backend], std::span<const PostArgs>(&p, 1), events[ev], in.joined);
      const int kept = cs.joined_on >= 0 ? -1 : ev;  // a joined post recorded no event
      if (tracer) tracer->postEnd(span, kept >= 0 ? &events[kept] : nullptr);
      setLastDone(cs, kept);
      recordPost(in.comm, p, kept, cs.joined_on);
      events.unref(ev);  // take()'s reference
      markPosted(in.comm);
    }
    cs.state = PostState::Posted;
    cs.pending = true;
  }

  void operator()(const instr::GroupBegin& in, int) {
    GroupState& g = groups[in.group];
    g.collecting = true;
    g.ops.clear();
    g.comms.clear();
  }

  void operator()(const instr::GroupEnd& in, int pc) {
    GroupState& g = groups[in.group];
    g.collecting = false;
    if (g.ops.empty()) {
      g.state = PostState::Skipped;
      return;
    }
    const int backend = plan.groups[in.group].backend;
    const int span = tracer ? tracer->postBegin(pc, current, stream(current)) : -1;
    const int ev = events.take();
    g.joined_on = postUnit(*backends[backend], g.ops, events[ev], in.joined);
    const int kept = g.joined_on >= 0 ? -1 : ev;
    if (tracer) tracer->postEnd(span, kept >= 0 ? &events[kept] : nullptr);
    if (kept >= 0) events.ref(kept);
    events.unref(g.event);
    g.event = kept;
    g.done = kept >= 0 ? &events[kept] : nullptr;
    g.state = PostState::Posted;
    for (std::size_t i = 0; i < g.comms.size(); ++i) {
      const int c = g.comms[i];
      markPosted(c);
      comms[c].joined_on = g.joined_on;
      setLastDone(comms[c], kept);
      recordPost(c, g.ops[i], kept, g.joined_on);
    }
    events.unref(ev);
  }

  void operator()(const instr::Wait& in, int) {
    Stream& cur = stream(current);
    if (in.comm >= 0) {
      CommState& cs = comms[in.comm];
      const PlanComm& c = plan.comms[in.comm];
      HIR_CHECK(cs.state != PostState::Never, "wait on '{}', which was never posted", c.name);
      if (cs.state == PostState::Skipped) return;
      // Posted on this stream (postJoined): already in its order.
      if (!(in.mode == WaitMode::Stream && cs.joined_on == current)) {
        HIR_INTERNAL_ASSERT(cs.last_done != nullptr,
                            "{}: wait on '{}', joined to stream {}, from stream {} in {} mode "
                            "(lowering marks a post joined only for a stream wait right after it)",
                            diag.where(c.node, scalars.data()), c.name, cs.joined_on, current,
                            toString(in.mode));
        backends[c.backend]->wait(*cs.last_done, cur, in.mode, opts.timeout);
      }
      cs.pending = false;
      return;
    }
    GroupState& g = groups[in.group];
    const PlanGroup& pg = plan.groups[in.group];
    HIR_CHECK(g.state != PostState::Never, "wait on group '{}', which was never posted", pg.name);
    if (g.state == PostState::Skipped) return;
    if (!(in.mode == WaitMode::Stream && g.joined_on == current)) {
      HIR_INTERNAL_ASSERT(g.joined_on < 0,
                          "{}: wait on group '{}', joined to stream {}, from stream {} in {} mode "
                          "(lowering marks a post joined only for a stream wait right after it)",
                          diag.where(pg.node, scalars.data()), pg.name, g.joined_on, current,
                          toString(in.mode));
      backends[pg.backend]->wait(*g.done, cur, in.mode, opts.timeout);
    }
    for (int c : g.comms) comms[c].pending = false;
  }

  // Collective: every rank reaches the same decision (PeerRoutes) and, if
  // the exchange is needed, calls every backend that maps peer memory.
  void operator()(const instr::Share&, int pc) {
    std::map<int, std::vector<ShareItem>> batch = routes.exchangeAt(pc, allocs);
    if (batch.empty()) return;
    for (const auto& [b, items] : batch) backends[b]->shareMemHandles(items);
    ++exchanges;
    routes.exchanged(pc, allocs);
  }

  void operator()(const instr::SetStream& in, int) {
    current = streamIndex(in.stream, scalars.data());
    stream(current);
  }

  void operator()(const instr::SyncStream& in, int) {
    const int k = streamIndex(in.stream, scalars.data());
    if (k != current && streams[k].used_this_run) {
      dev.record(*streams[k].event, *streams[k].stream);
      dev.wait(stream(current), *streams[k].event);
    }
  }

  void operator()(const instr::Fill& in, int) {
    const DType t = plan.allocs[in.ref.alloc].dtype;
    dev.fill(stream(current), spans[0].data(t), t, static_cast<std::size_t>(spans[0].count()),
             in.value.eval(scalars.data()), in.step.eval(scalars.data()));
  }

  void operator()(const instr::Copy& in, int) {
    const AllocCache::Span &src = spans[0], &dst = spans[1];
    const DType t = plan.allocs[in.src.alloc].dtype;
    HIR_CHECK(src.count() == dst.count(),
              "copies {} elements of '{}' into {} elements of '{}'; a copy needs equal sizes",
              src.count(), in.src.text, dst.count(), in.dst.text);
    dev.copy(stream(current), dst.data(t), src.data(t),
             static_cast<std::size_t>(src.count()) * dtypeSize(t));
  }

  void operator()(const instr::Check& in, int) {
    const DType t = plan.allocs[in.ref.alloc].dtype;
    const int64_t exec = diag.beginCheck(in.check, scalars.data());
    dev.check(stream(current), spans[0].data(t), t, static_cast<std::size_t>(spans[0].count()),
              in.value.eval(scalars.data()), in.step.eval(scalars.data()), in.tolerance,
              diag.record(in.check), exec);
  }

  // ------------------------------------------------------------- compute
  // Access i of the current instruction as the core's shape rules take it.
  Operand operand(const PlanRef& ref, int i) const {
    return Operand{&ref, &allocs[ref.alloc].layout, spans[i].ref};
  }

  void operator()(const instr::Matmul& in, int) {
    const MatmulShape s = matmulShape(in, operand(in.a, 0), operand(in.b, 1), operand(in.out, 2));
    MatmulArgs args;
    args.dtype = plan.allocs[in.a.alloc].dtype;
    args.m = s.m;
    args.n = s.n;
    args.k = s.k;
    args.a = spans[0].data(args.dtype);
    args.b = spans[1].data(args.dtype);
    args.out = spans[2].data(args.dtype);
    args.lda = s.lda;
    args.ldb = s.ldb;
    args.ldo = s.ldo;
    args.transpose_a = in.transpose_a;
    args.transpose_b = in.transpose_b;
    args.accumulate = in.accumulate;
    dev.matmul(stream(current), args);
  }

  void operator()(const instr::Add& in, int) {
    checkAddShapes(operand(in.a, 0), operand(in.b, 1), operand(in.out, 2));
    const DType t = plan.allocs[in.a.alloc].dtype;
    dev.add(stream(current), spans[2].data(t), spans[0].data(t), spans[1].data(t), t,
            static_cast<std::size_t>(spans[0].count()));
  }

  void operator()(const instr::Kernel& in, int pc) {
    KernelCall& call = kernel_calls[static_cast<std::size_t>(kernel_call_at[pc])];
    // The tensors in the order the instruction declares its accesses:
    // reads, then writes.
    auto fill = [&](std::vector<KernelTensor>& out, const std::vector<PlanRef>& refs, int first) {
      for (std::size_t i = 0; i < refs.size(); ++i) {
        const AllocCache::Span& s = spans[first + static_cast<int>(i)];
        KernelTensor& t = out[i];
        t.dtype = plan.allocs[refs[i].alloc].dtype;
        t.data = s.data(t.dtype);
        t.count = static_cast<std::size_t>(s.count());
        t.shape.resize(static_cast<std::size_t>(s.ref.dims));
        for (int d = 0; d < s.ref.dims; ++d)
          t.shape[d] = refExtent(refs[i], allocs[refs[i].alloc].layout, s.ref, d);
      }
    };
    fill(call.reads, in.reads, 0);
    fill(call.writes, in.writes, static_cast<int>(in.reads.size()));
    for (std::size_t i = 0; i < in.args.size(); ++i)
      call.args[i].second = in.args[i].second.eval(scalars.data());
    Stream& s = stream(current);
    const KernelLaunch launch{dev,         s,           dev.nativeStream(s), call.reads,
                              call.writes, call.args,   call.info->name};
    // What the kernel throws gets the node's place (the run's catch adds
    // it to ProgramError and RuntimeError): a UsageError (an arg its node
    // does not give, reads or writes it does not take) is the node's fault,
    // an exception of the kernel's own its failure.
    try {
      call.info->fn(launch);
    } catch (const UsageError& e) {
      throw ProgramError(e.what());
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw RuntimeError(fmt::format("kernel '{}' failed: {}", call.info->name, e.what()));
    }
  }

  // ------------------------------------------------------------------ run
  void run(void* native) {
    failure.throwIfFailed();
    Watchdog::Scope scope(watchdog, Section::Run, opts.timeout + kProgressSlack);
    ++runs;
    Stream* s0;
    if (native == nullptr) {
      s0 = &dev.defaultStream();
    } else {
      auto& w = wrapped[native];
      if (!w) w = dev.wrapStream(native);
      s0 = w.get();
    }
    streams[0].stream = s0;
    if (graph.replaying()) return replay(*s0);
    if (graph.captures(runs)) graph.begin(*s0, runs);
    if (tracer) tracer->startRun(*s0);
    for (StreamState& s : streams) s.used_this_run = false;
    current = 0;
    dev.record(*run_start, stream(0));
    HIR_LOG_DEBUG(Subsys::Eval, "run {} starts", runs);
    scalars = plan.scalar_init;
    scalars[kRankSlot] = rank;
    for (int c : posted_this_run) comms[c].posted_this_run = false;  // after a failed run
    posted_this_run.clear();

    const int end = static_cast<int>(plan.code.size());
    int pc = 0;
    // Every failure fails the evaluator (failure.h): the other ranks may
    // wait on this one's next posts, so nothing it posted is waited for.
    try {
      while (pc < end) {
        const uint8_t info = pc_info[pc];
        if (info & kWatched) watchdog.tick(pc);
        if (tracer) {
          pc = tracedStep(pc);
          continue;
        }
        if (info & kAccessMask) resolveAccesses(plan.code[pc]);
        pc = step(plan, pc, scalars.data(), *this);
      }
      // The watchdog failed the run while this thread was blocked, and the
      // call that blocked returned normally (what came after was abandoned,
      // and a post to an aborted backend throws).
      if (failure.failed()) throw RuntimeError("the run was aborted");
      finishRun();
      if (graph.capturing()) graph.end(*s0, runs);
      HIR_LOG_DEBUG(Subsys::Eval, "run {} enqueued", runs);
    } catch (const ProgramError& e) {
      graph.abandon(*s0);
      failure.fail(e.what());
      throw ProgramError(fmt::format("{}: {}", at(pc), e.what()));
    } catch (const TimeoutError& e) {
      graph.abandon(*s0);
      // A host-mode wait ran out of time: say where, what is pending and
      // what was posted last.
      throw TimeoutError(failure.messageAt(at(pc), e.what()));
    } catch (const RuntimeError& e) {
      graph.abandon(*s0);
      // A backend's own timeout or a device failure came first, an exchange
      // between ranks failed, or the watchdog aborted a call that had no
      // timeout (then it is a timeout).
      bool watchdog_fired = false;
      std::string message = failure.messageAt(at(pc), e.what(), &watchdog_fired);
      if (watchdog_fired) throw TimeoutError(message);
      if (dynamic_cast<const BackendError*>(&e)) throw BackendError(message);
      throw RuntimeError(message);
    } catch (const std::exception& e) {
      graph.abandon(*s0);
      failure.fail(e.what());
      throw;
    }
  }

  // ---------------------------------------------------------------- graphs
  // The events recorded so far are not waited on again: communications'
  // and groups' done events, the blocks' users (before and after a
  // capture, which may not wait on events from outside it, and whose
  // events nobody may ask about).
  void forgetEvents() {
    for (CommState& cs : comms) {
      setLastDone(cs, -1);
      cs.pending = false;
    }
    for (GroupState& g : groups) {
      events.unref(g.event);
      g.event = -1;
      g.done = nullptr;
    }
    allocs.forgetUsers();
  }

  GraphCapture::Hooks graphHooks() {
    return {[this] {
              try {
                synchronizeAll();
              } catch (const std::exception& e) {
                failure.fail(e.what());
                throw;
              }
            },
            [this] { forgetEvents(); },
            [this] { flight.markCaptured([this](int e) { events.unref(e); }); }};
  }

  // A run of a captured program.
  void replay(Stream& s0) {
    try {
      graph.replay(s0);
    } catch (const std::exception& e) {
      failure.fail(e.what());
      throw BackendError(fmt::format("run {} (a graph replay): on rank {}: {}", runs, rank,
                                     e.what()));
    }
  }

  // One instruction with its host span, and a span on its stream for
  // compute and stream-mode waits (posts trace themselves).
  int tracedStep(int pc) {
    const auto begin = std::chrono::steady_clock::now();
    if (pc_info[pc] & kAccessMask) resolveAccesses(plan.code[pc]);
    const int span = tracer->onStream(pc) ? tracer->gpuBegin(pc, current, stream(current)) : -1;
    const int next = step(plan, pc, scalars.data(), *this);
    if (span >= 0) tracer->gpuEnd(span, stream(current));
    tracer->host(pc, begin, std::chrono::steady_clock::now(), scalars.data());
    return next;
  }

  std::string here(int pc) const { return diag.where(plan.code[pc].node, scalars.data()); }
  // here(), or the end of the run (finishRun).
  std::string at(int pc) const {
    return pc < static_cast<int>(plan.code.size())
               ? here(pc)
               : fmt::format("the end of run {}: on rank {}", runs, rank);
  }

  // Stream 0 waits for every stream and every communication of the run, so
  // the caller's stream carries all of the run's dependencies.
  void finishRun() {
    Stream& s0 = *streams[0].stream;
    for (int k = 1; k < kMaxStreams; ++k) {
      StreamState& s = streams[k];
      if (!s.used_this_run) continue;
      dev.record(*s.event, *s.stream);
      dev.wait(s0, *s.event);
    }
    // A joined post (no done) is in its stream's order, joined above.
    for (int c : posted_this_run) {
      if (comms[c].last_done) dev.wait(s0, *comms[c].last_done);
      comms[c].posted_this_run = false;
    }
    allocs.endRun();
  }

  std::string synchronizing() const {
    return fmt::format("synchronize after run {}: on rank {}", runs, rank);
  }

  void synchronize() {
    failure.throwIfFailed();
    Watchdog::Scope scope(watchdog, Section::Synchronize, opts.timeout + kProgressSlack);
    synchronizeAll();
  }

  // One deadline for all: a stuck run fails after `timeout`, not after a
  // timeout per stream. Communications first, through their backends (which
  // may tell a library's asynchronous error from slowness), then streams.
  void synchronizeAll() {
    try {
      const auto start = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < comms.size(); ++i)
        if (comms[i].last_done)
          backends[plan.comms[i].backend]->wait(*comms[i].last_done, dev.defaultStream(),
                                                WaitMode::Host, remainingOf(opts.timeout, start));
      for (StreamState& s : streams)
        if (s.stream) dev.synchronize(*s.stream, remainingOf(opts.timeout, start));
    } catch (const TimeoutError& e) {
      throw TimeoutError(failure.messageAt(synchronizing(), e.what()));
    } catch (const BackendError& e) {
      throw BackendError(failure.messageAt(synchronizing(), e.what()));
    }
    for (CommState& c : comms) c.pending = false;
  }
};

// ------------------------------------------------------------------- API
Evaluator::Evaluator(Session& session, const Program& program, const EvaluatorOptions& options)
    : impl_(std::make_unique<Impl>(session, program, options)) {}

Evaluator::~Evaluator() = default;

void Evaluator::bind(std::string_view name, void* data, std::size_t bytes) {
  impl_->allocs.bind(name, data, bytes);
  impl_->graph.rebound(impl_->runs);
}

void Evaluator::run(void* stream) { impl_->run(stream); }
void Evaluator::synchronize() { impl_->synchronize(); }
RunReport Evaluator::report() const { return impl_->diag.report(); }
const Plan& Evaluator::plan() const { return impl_->plan; }
int64_t Evaluator::exchanges() const { return impl_->exchanges; }
GraphStats Evaluator::graphStats() const { return impl_->graph.stats(); }
const std::vector<std::string>& Evaluator::symmetricAllocations() const {
  return impl_->symmetric;
}
std::string Evaluator::traceEvents() const {
  return impl_->tracer ? impl_->tracer->events() : std::string();
}

}  // namespace hir
