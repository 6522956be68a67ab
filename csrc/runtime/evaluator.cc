// The Evaluator's loading and teardown on one rank, and its public API
// (hostir/evaluator.h says what it does; docs/architecture.md the stream
// and event rules). Loading compiles the program, sets up its backends,
// places symmetric memory and binds the kernels; evaluator_impl.h lists
// the files that run what was loaded.
#include <hostir/evaluator.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "common/check.h"
#include "common/log.h"
#include "common/settings.h"
#include "runtime/evaluator_impl.h"

namespace hir {
namespace {

CompiledProgram compileFor(Session& session, const Program& program,
                           const EvaluatorOptions& opts) {
  Bootstrap& boot = session.bootstrap();
  // Before anything decides by them: the check, the trace and the backends.
  if (boot.world() > 1) agreeOnSettings(boot, session.settings());
  HIR_CHECK_AS(UsageError, opts.timeout.count() > 0,
               "EvaluatorOptions::timeout must be positive (every host wait is bounded by it), "
               "got {} ms",
               opts.timeout.count());
  HIR_CHECK_AS(UsageError, opts.check_steps_per_rank >= 1,
               "EvaluatorOptions::check_steps_per_rank must be at least 1, got {}",
               opts.check_steps_per_rank);
  CompileOptions co = compileOptionsFor(boot, session.device().kind(), opts.check_schedule,
                                        session.settings());
  co.max_steps_per_rank = opts.check_steps_per_rank;
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

Evaluator::Impl::Impl(Session& s, std::shared_ptr<const void> keep, const Program& program,
                      const EvaluatorOptions& o)
    : keep_session(std::move(keep)),
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
  ctx.settings = s.settings();
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

void Evaluator::Impl::requireGraphMode() const {
  HIR_CHECK_AS(UsageError, !opts.trace,
               "graph mode and tracing cannot be combined: a trace times every node of a run "
               "on the host, and a replayed graph has no per-node host work");
  HIR_CHECK_AS(UsageError, dev.supports(DeviceFeature::Graphs),
               "graph mode needs a device with graphs (cuda); device '{}' has none",
               dev.kind());
  requireCapturable(compiled);
}

void Evaluator::Impl::placeSymmetric() {
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

void Evaluator::Impl::bindKernels() {
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

Evaluator::Impl::~Impl() {
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

// ------------------------------------------------------------------- API
Evaluator::Evaluator(Session& session, const Program& program, const EvaluatorOptions& options)
    : impl_(std::make_unique<Impl>(session, session.state_, program, options)) {}

Evaluator::~Evaluator() = default;

namespace {

// One thread at a time inside run(), synchronize() and bind(): a second is
// a UsageError naming the call, not a race inside the run.
class OneCaller {
 public:
  OneCaller(std::atomic<bool>& busy, const char* call) : busy_(busy) {
    HIR_CHECK_AS(UsageError, !busy_.exchange(true, std::memory_order_acquire),
                 "Evaluator::{}() while another thread is inside this Evaluator's run(), "
                 "synchronize() or bind(): an Evaluator is used from one thread at a time "
                 "(serialize the calls, or give each thread its own Evaluator)",
                 call);
  }
  ~OneCaller() { busy_.store(false, std::memory_order_release); }
  OneCaller(const OneCaller&) = delete;
  OneCaller& operator=(const OneCaller&) = delete;

 private:
  std::atomic<bool>& busy_;
};

}  // namespace

void Evaluator::bind(std::string_view name, void* data, std::size_t bytes) {
  OneCaller one(impl_->busy, "bind");
  impl_->allocs.bind(name, data, bytes);
  impl_->graph.rebound(impl_->runs);
}

void Evaluator::run(void* stream) {
  OneCaller one(impl_->busy, "run");
  impl_->run(stream);
}
void Evaluator::synchronize() {
  OneCaller one(impl_->busy, "synchronize");
  impl_->synchronize();
}
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
