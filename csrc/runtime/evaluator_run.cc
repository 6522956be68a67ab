// A run of the Evaluator on one rank (evaluator_impl.h): its start, the
// end that hands all of its work to the caller's stream, where its failures
// surface (and what the watchdog says when the host is stuck),
// synchronize(), and what graph mode asks of the evaluator's state.
#include <chrono>

#include "common/check.h"
#include "common/log.h"
#include "runtime/evaluator_impl.h"

namespace hir {

// --------------------------------------------------------------------- run
void Evaluator::Impl::run(void* native) {
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

  int pc = 0;
  // Every failure fails the evaluator (failure.h): the other ranks may
  // wait on this one's next posts, so nothing it posted is waited for.
  try {
    stepThrough(pc);
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

void Evaluator::Impl::finishRun() {
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

std::string Evaluator::Impl::synchronizing() const {
  return fmt::format("synchronize after run {}: on rank {}", runs, rank);
}

void Evaluator::Impl::synchronize() {
  failure.throwIfFailed();
  Watchdog::Scope scope(watchdog, Section::Synchronize, opts.timeout + kProgressSlack);
  synchronizeAll();
}

void Evaluator::Impl::synchronizeAll() {
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

std::string Evaluator::Impl::here(int pc) const {
  return diag.where(plan.code[pc].node, scalars.data());
}

std::string Evaluator::Impl::at(int pc) const {
  return pc < static_cast<int>(plan.code.size())
             ? here(pc)
             : fmt::format("the end of run {}: on rank {}", runs, rank);
}

// ----------------------------------------------------------------- failure
std::string Evaluator::Impl::stuckWhere(Section s) {
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

void Evaluator::Impl::onStuck(Section s, Duration stuck) {
  if (s == Section::Teardown) return;  // teardown aborted already, or has nothing to abort
  failure.fail(fmt::format("{}: no progress for {} ms (the timeout is {} ms): the watchdog "
                           "aborted the communications",
                           stuckWhere(s), stuck.count(), opts.timeout.count()),
               /*from_watchdog=*/true);
}

void Evaluator::Impl::endJob(Section s, Duration stuck) {
  failure.endJob(fmt::format("{}: no progress for {} ms", stuckWhere(s), stuck.count()));
}

// ------------------------------------------------------------------ graphs
void Evaluator::Impl::forgetEvents() {
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

GraphCapture::Hooks Evaluator::Impl::graphHooks() {
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

void Evaluator::Impl::replay(Stream& s0) {
  try {
    graph.replay(s0);
  } catch (const std::exception& e) {
    failure.fail(e.what());
    throw BackendError(fmt::format("run {} (a graph replay): on rank {}: {}", runs, rank,
                                   e.what()));
  }
}

}  // namespace hir
