// The Evaluator's instructions on one rank (evaluator_impl.h): the executor
// of each, which step() (plan/step.h) hands every instruction that is not
// control flow, and the loop that steps through a run. Every post records
// its done event and the communications it carries; every wait orders the
// current stream, or the host, after one.
#include <algorithm>
#include <chrono>

#include "common/check.h"
#include "runtime/evaluator_impl.h"

namespace hir {

// ---------------------------------------------------------------- stepping
void Evaluator::Impl::stepThrough(int& pc) {
  const int end = static_cast<int>(plan.code.size());
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
}

int Evaluator::Impl::tracedStep(int pc) {
  const auto begin = std::chrono::steady_clock::now();
  if (pc_info[pc] & kAccessMask) resolveAccesses(plan.code[pc]);
  const int span = tracer->onStream(pc) ? tracer->gpuBegin(pc, current, stream(current)) : -1;
  const int next = step(plan, pc, scalars.data(), *this);
  if (span >= 0) tracer->gpuEnd(span, stream(current));
  tracer->host(pc, begin, std::chrono::steady_clock::now(), scalars.data());
  return next;
}

void Evaluator::Impl::resolveAccesses(const Instr& in) {
  if (const auto* p = std::get_if<instr::Post>(&in.op); p && skips(*p)) return;
  int n = 0;
  const bool aliasing = aliasingOf(in) != Aliasing::Free;
  std::array<ResolvedAccess, kMaxAccesses> resolved;
  forEachAccess(plan, in, [&](const PlanRef& ref, Access access) {
    spans[n] = allocs.resolve(ref, scalars.data(), current);
    if (aliasing) resolved[n] = ResolvedAccess{&ref, access, spans[n].offset(), spans[n].count()};
    ++n;
  });
  // What the check found already, unless it was skipped or cut short.
  if (aliasing) checkAliasing(in, std::span(resolved.data(), n));
}

// ----------------------------------------------------------------- streams
Stream& Evaluator::Impl::stream(int k) {
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

void Evaluator::Impl::orderAfterUsers(const AllocCache::Block& b) {
  Stream& cur = stream(current);
  for (int c : b.comm_users)
    if (comms[c].last_done) dev.wait(cur, *comms[c].last_done);
  for (int k = 0; k < kMaxStreams; ++k) {
    if (k == current || !(b.stream_mask >> k & 1) || !streams[k].stream) continue;
    dev.record(*streams[k].event, *streams[k].stream);
    dev.wait(cur, *streams[k].event);
  }
}

void Evaluator::Impl::drainUsers(const AllocCache::Block& b) {
  const auto start = std::chrono::steady_clock::now();
  for (int c : b.comm_users)
    if (comms[c].last_done)
      dev.synchronize(*comms[c].last_done, remainingOf(opts.timeout, start));
  for (int k = 0; k < kMaxStreams; ++k)
    if ((b.stream_mask >> k & 1) && streams[k].stream)
      dev.synchronize(*streams[k].stream, remainingOf(opts.timeout, start));
}

// ------------------------------------------------------------------ memory
void Evaluator::Impl::operator()(const instr::Allocate& in, int) {
  allocs.allocate(in.alloc, scalars.data(), current);
}
void Evaluator::Impl::operator()(const instr::Deallocate& in, int) { allocs.deallocate(in.alloc); }

// ------------------------------------------------------- communications
PostArgs Evaluator::Impl::makePost(int slot) {
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

void Evaluator::Impl::setLastDone(CommState& cs, int event) {
  if (event >= 0) events.ref(event);
  events.unref(cs.last_event);
  cs.last_event = event;
  cs.last_done = event >= 0 ? &events[event] : nullptr;
}

void Evaluator::Impl::recordPost(int slot, const PostArgs& p, int event, int joined) {
  if (event >= 0) events.ref(event);
  events.unref(flight.record(slot, p, {&comms[slot].loop_values, runs, current, joined, event}));
}

void Evaluator::Impl::markPosted(int slot) {
  if (comms[slot].posted_this_run) return;
  comms[slot].posted_this_run = true;
  posted_this_run.push_back(slot);
}

Evaluator::Impl::Posted Evaluator::Impl::postUnit(int pc, int backend,
                                                  std::span<const PostArgs> ops,
                                                  std::span<const int> slots, bool joined) {
  Stream& cur = stream(current);
  const int span = tracer ? tracer->postBegin(pc, current, cur) : -1;
  const int ev = events.take();
  Backend& b = *backends[backend];
  Posted out;
  if (!joined)
    b.post(ops, cur, events[ev]);
  else if (b.postJoined(ops, cur, events[ev]))
    out.joined_on = current;
  out.event = out.joined_on >= 0 ? -1 : ev;  // a joined post recorded no event
  if (tracer) tracer->postEnd(span, out.event >= 0 ? &events[out.event] : nullptr);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const int c = slots[i];
    markPosted(c);
    comms[c].joined_on = out.joined_on;
    setLastDone(comms[c], out.event);
    recordPost(c, ops[i], out.event, out.joined_on);
  }
  events.unref(ev);  // take()'s reference
  return out;
}

void Evaluator::Impl::operator()(const instr::Post& in, int pc) {
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
    postUnit(pc, c.backend, std::span<const PostArgs>(&p, 1), std::span<const int>(&in.comm, 1),
             in.joined);
  }
  cs.state = PostState::Posted;
  cs.pending = true;
}

void Evaluator::Impl::operator()(const instr::GroupBegin& in, int) {
  GroupState& g = groups[in.group];
  g.collecting = true;
  g.ops.clear();
  g.comms.clear();
}

void Evaluator::Impl::operator()(const instr::GroupEnd& in, int pc) {
  GroupState& g = groups[in.group];
  g.collecting = false;
  if (g.ops.empty()) {
    g.state = PostState::Skipped;
    return;
  }
  const Posted u = postUnit(pc, plan.groups[in.group].backend, g.ops, g.comms, in.joined);
  g.joined_on = u.joined_on;
  if (u.event >= 0) events.ref(u.event);
  events.unref(g.event);
  g.event = u.event;
  g.done = u.event >= 0 ? &events[u.event] : nullptr;
  g.state = PostState::Posted;
}

bool Evaluator::Impl::waitFor(PostState state, int joined_on, Event* done, int backend, int node,
                              std::string_view what, const std::string& name, WaitMode mode,
                              Stream& cur) {
  HIR_CHECK(state != PostState::Never, "wait on {}'{}', which this rank has not posted yet",
            what, name);
  if (state == PostState::Skipped) return false;
  // Posted on this stream (postJoined): already in its order.
  if (mode == WaitMode::Stream && joined_on == current) return true;
  HIR_INTERNAL_ASSERT(done != nullptr,
                      "{}: wait on {}'{}', joined to stream {}, from stream {} in {} mode "
                      "(lowering marks a post joined only for a stream wait right after it)",
                      diag.where(node, scalars.data()), what, name, joined_on, current,
                      toString(mode));
  backends[backend]->wait(*done, cur, mode, opts.timeout);
  return true;
}

void Evaluator::Impl::operator()(const instr::Wait& in, int) {
  Stream& cur = stream(current);
  if (in.comm >= 0) {
    CommState& cs = comms[in.comm];
    const PlanComm& c = plan.comms[in.comm];
    if (waitFor(cs.state, cs.joined_on, cs.last_done, c.backend, c.node, "", c.name, in.mode, cur))
      cs.pending = false;
    return;
  }
  const GroupState& g = groups[in.group];
  const PlanGroup& pg = plan.groups[in.group];
  if (waitFor(g.state, g.joined_on, g.done, pg.backend, pg.node, "group ", pg.name, in.mode, cur))
    for (int c : g.comms) comms[c].pending = false;
}

// Collective: every rank reaches the same decision (PeerRoutes) and, if
// the exchange is needed, calls every backend that maps peer memory.
void Evaluator::Impl::operator()(const instr::Share&, int pc) {
  std::map<int, std::vector<ShareItem>> batch = routes.exchangeAt(pc, allocs);
  if (batch.empty()) return;
  for (const auto& [b, items] : batch) backends[b]->shareMemHandles(items);
  ++exchanges;
  routes.exchanged(pc, allocs);
}

// ------------------------------------------------------- streams, data
void Evaluator::Impl::operator()(const instr::SetStream& in, int) {
  current = streamIndex(in.stream, scalars.data());
  stream(current);
}

void Evaluator::Impl::operator()(const instr::SyncStream& in, int) {
  const int k = streamIndex(in.stream, scalars.data());
  if (k != current && streams[k].used_this_run) {
    dev.record(*streams[k].event, *streams[k].stream);
    dev.wait(stream(current), *streams[k].event);
  }
}

void Evaluator::Impl::operator()(const instr::Fill& in, int) {
  const DType t = plan.allocs[in.ref.alloc].dtype;
  const auto count = static_cast<std::size_t>(spans[0].count());
  if (in.random) {
    const RandomPattern p = randomPattern(*in.random, t, scalars.data());
    dev.fillRandom(stream(current), spans[0].data(t), t, count, p);
    return;
  }
  dev.fill(stream(current), spans[0].data(t), t, count, in.value.eval(scalars.data()),
           in.step.eval(scalars.data()));
}

void Evaluator::Impl::operator()(const instr::Copy& in, int) {
  const AllocCache::Span &src = spans[0], &dst = spans[1];
  const DType t = plan.allocs[in.src.alloc].dtype;
  HIR_CHECK(src.count() == dst.count(),
            "copies {} elements of '{}' into {} elements of '{}'; a copy needs equal sizes",
            src.count(), in.src.text, dst.count(), in.dst.text);
  dev.copy(stream(current), dst.data(t), src.data(t),
           static_cast<std::size_t>(src.count()) * dtypeSize(t));
}

void Evaluator::Impl::operator()(const instr::Check& in, int) {
  const DType t = plan.allocs[in.ref.alloc].dtype;
  const Tolerance tol = checkTolerance(in, scalars.data());
  if (in.expected) checkSameCount("check", operand(in.ref, 0), operand(*in.expected, 1));
  const int64_t exec = diag.beginCheck(in.check, scalars.data());
  const auto count = static_cast<std::size_t>(spans[0].count());
  if (in.expected) {
    const DType et = plan.allocs[in.expected->alloc].dtype;
    dev.checkAgainst(stream(current), spans[0].data(t), t, spans[1].data(et), et, count, tol,
                     diag.record(in.check), exec);
    return;
  }
  dev.check(stream(current), spans[0].data(t), t, count, in.value.eval(scalars.data()),
            in.step.eval(scalars.data()), tol, diag.record(in.check), exec);
}

// ----------------------------------------------------------------- compute
void Evaluator::Impl::operator()(const instr::Matmul& in, int) {
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

void Evaluator::Impl::operator()(const instr::Add& in, int) {
  checkAddShapes(operand(in.a, 0), operand(in.b, 1), operand(in.out, 2));
  const DType t = plan.allocs[in.a.alloc].dtype;
  dev.add(stream(current), spans[2].data(t), spans[0].data(t), spans[1].data(t), t,
          static_cast<std::size_t>(spans[0].count()));
}

void Evaluator::Impl::operator()(const instr::Unary& in, int) {
  checkSameCount(toString(in.op), operand(in.in, 0), operand(in.out, 1));
  UnaryArgs args;
  args.op = in.op;
  args.in_type = plan.allocs[in.in.alloc].dtype;
  args.out_type = plan.allocs[in.out.alloc].dtype;
  args.in = spans[0].data(args.in_type);
  args.out = spans[1].data(args.out_type);
  args.count = static_cast<std::size_t>(spans[0].count());
  args.factor = in.factor.eval(scalars.data());
  dev.unary(stream(current), args);
}

void Evaluator::Impl::operator()(const instr::Kernel& in, int pc) {
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
  } catch (...) {
    // Not a std::exception (a plugin's own type, an int): the kernel's
    // failure all the same, never std::terminate.
    throw RuntimeError(fmt::format("kernel '{}' failed: it threw something that is not a "
                                   "std::exception",
                                   call.info->name));
  }
}

}  // namespace hir
