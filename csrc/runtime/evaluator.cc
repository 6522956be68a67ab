// The evaluator: runs a Plan on one rank. See evaluator.h for the contract
// and docs/architecture.md for the stream and event rules.
//
// Per-node work is integer arithmetic on the scalar slots, a few device
// calls (enqueue, record, wait) and no allocation in steady state, except the
// host device's task closures.
#include <hostir/evaluator.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <tuple>

#include "analysis/schedule_check.h"
#include "analysis/validate.h"
#include <hostir/backend.h>
#include "common/check.h"
#include "common/overloaded.h"
#include <hostir/device.h>
#include "lower/lower.h"
#include "plan/plan.h"
#include <hostir/session.h>

namespace hir {
namespace {

// Loop contexts of check executions are kept for this many executions per
// check node; later failures are reported by execution number.
constexpr int64_t kMaxCheckContexts = 4096;
// Loop indices remembered per post, for timeout reports.
constexpr std::size_t kMaxLoopDepth = 8;

}  // namespace

struct Evaluator::Impl {
  // --------------------------------------------------------------- state
  struct AllocState {
    void* ptr = nullptr;          // live pointer (cache or bound)
    std::size_t bytes = 0;
    std::vector<int64_t> shape, strides;  // strides in elements
    bool live = false;
    void* bound = nullptr;        // caller's buffer, if bound
    std::size_t bound_bytes = 0;
    void* cached = nullptr;       // device memory owned by this node's cache
    std::size_t cached_bytes = 0;
    std::vector<int> comm_users;  // comms that used it since it was (re)allocated
    uint32_t stream_mask = 0;     // streams that touched it since then
    // Blocks this node has had: the first allocation and each change of size
    // start a new one. The same on every rank for ipc-shared allocations
    // (the schedule check says so), which makes it an exchange key. A
    // re-bind() to another buffer of the same size is not a new one (ipc
    // never maps caller buffers).
    uint64_t generation = 0;
    std::size_t generation_bytes = 0;
    uint64_t exchanged_generation = 0;  // at the last exchange that covered it
  };
  // Backends that map peer memory (ipc): where the k-th message of this
  // rank with a peer lives on the peer's side, from the load-time trace.
  struct Route {
    int comm = -1, alloc = -1;
    std::size_t offset = 0;
    int remote_alloc = -1;
    std::size_t remote_offset = 0;
  };
  struct PeerRoutes {
    std::vector<Route> sends, recvs;  // one run's messages to / from the peer
    uint64_t sent = 0, received = 0;  // posted so far, over every run
  };
  // What one share_mem_handles instruction exchanges. A link is (from, to,
  // send allocation, recv allocation) of messages of the listed
  // communications, over every rank: all ranks compute the same links, and,
  // because ipc-shared allocations happen in the same order everywhere (the
  // schedule check says so), the same block generations, so all decide
  // alike whether the exchange is needed.
  struct ShareSpec {
    std::vector<std::array<int, 4>> links;
    std::map<int, std::vector<ShareItem>> items;  // backend -> this rank's items
  };
  enum class PostState : uint8_t { Never, Posted, Skipped };
  struct CommState {
    std::unique_ptr<Event> done;
    // Own done, or the enclosing group's; null when the post joined a stream
    // (joined_on): that stream's order is then its only completion signal.
    Event* last_done = nullptr;
    PostState state = PostState::Never;
    bool pending = false;         // posted and not waited yet (for reports)
    bool posted_this_run = false;
    int joined_on = -1;           // stream whose order already includes the post (postJoined)
    std::array<int64_t, kMaxLoopDepth> loop_values{};
  };
  struct GroupState {
    std::unique_ptr<Event> done;
    PostState state = PostState::Never;
    bool collecting = false;
    int joined_on = -1;
    std::vector<PostArgs> ops;
    std::vector<int> comms;
  };
  struct StreamState {
    std::unique_ptr<Stream> owned;
    Stream* stream = nullptr;
    std::unique_ptr<Event> event;  // sync_stream, joins
    bool used_this_run = false;
  };

  Session& session;
  Device& dev;
  Bootstrap& boot;
  EvaluatorOptions opts;
  Plan plan;
  int rank = 0;
  std::vector<int> team_rank;  // per team: this rank's team rank, or -1
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<int64_t> scalars;
  std::vector<AllocState> allocs;
  std::vector<CommState> comms;
  std::vector<GroupState> groups;
  std::array<StreamState, kMaxStreams> streams;
  std::map<void*, std::unique_ptr<Stream>> wrapped;  // caller streams
  std::unique_ptr<Event> run_start;
  int current = 0;
  int64_t exchanges = 0;
  std::vector<bool> maps_peer_memory;  // per plan backend
  std::vector<PeerRoutes> routes;      // per peer; empty when no backend maps peer memory
  bool routes_truncated = false;
  std::map<int, ShareSpec> shares;     // by pc of the Share instruction
  std::set<std::array<uint64_t, 6>> exchanged;  // links with both block generations
  std::vector<void*> retired;          // replaced blocks of ipc-shared allocations
  CheckRecord* records = nullptr;
  std::vector<int64_t> check_executions;
  std::vector<std::vector<int64_t>> check_contexts;  // per check: flat loop values
  std::vector<int> posted_this_run;  // distinct comm slots, this run

  Impl(Session& s, const Program& program, const EvaluatorOptions& o)
      : session(s), dev(s.device()), boot(s.bootstrap()), opts(o) {
    rank = boot.rank();
    validate(program, ValidateOptions{boot.world()});
    LowerOptions lo;
    lo.world = boot.world();
    lo.device = std::string(dev.kind());
    plan = lower(program, lo);
    for (const std::string& name : plan.backends) {
      const BackendInfo* info = findBackend(name);
      HIR_INTERNAL_ASSERT(info, "lowering bound unknown backend '{}'", name);
      maps_peer_memory.push_back(info->maps_peer_memory);
    }
    const bool peer_mapped = std::count(maps_peer_memory.begin(), maps_peer_memory.end(), true);
    ScheduleCheckOptions check;
    // Node names cost an allgather: only for programs that care.
    const bool node_bound = std::any_of(plan.comms.begin(), plan.comms.end(),
                                        [](const PlanComm& c) { return !c.cross_node_why.empty(); });
    if (boot.world() > 1 && node_bound) check.nodes = boot.nodes();
    P2pTrace trace;
    if (opts.check_schedule)
      trace = checkSchedule(plan, check).p2p;
    else if (peer_mapped) {
      trace = traceP2p(plan, check);
      checkPeerNodes(plan, trace, check.nodes);  // unchecked programs still get this rule
    }
    if (peer_mapped) planPeerMemory(trace);

    for (const PlanTeam& t : plan.teams) {
      auto it = std::find(t.ranks.begin(), t.ranks.end(), rank);
      team_rank.push_back(it == t.ranks.end() ? -1 : static_cast<int>(it - t.ranks.begin()));
    }
    BackendContext ctx;
    ctx.device = &dev;
    ctx.bootstrap = &boot;
    ctx.timeout = opts.timeout;
    for (const PlanTeam& t : plan.teams) ctx.teams.push_back(t.ranks);
    for (const std::string& name : plan.backends) {
      const BackendInfo* info = findBackend(name);
      HIR_INTERNAL_ASSERT(info, "lowering bound unknown backend '{}'", name);
      backends.push_back(info->create());
      backends.back()->setup(ctx);
    }
    scalars = plan.scalar_init;
    scalars[kRankSlot] = rank;
    allocs.resize(plan.allocs.size());
    comms.resize(plan.comms.size());
    for (CommState& c : comms) c.done = dev.createEvent();
    groups.resize(plan.groups.size());
    for (GroupState& g : groups) g.done = dev.createEvent();
    run_start = dev.createEvent();
    if (!plan.checks.empty()) records = dev.allocateCheckRecords(plan.checks.size());
    check_executions.assign(plan.checks.size(), 0);
    check_contexts.resize(plan.checks.size());
  }

  ~Impl() {
    try {
      synchronize();
    } catch (const std::exception&) {
      // Teardown after a failure: memory may still be in use by a stuck
      // communication, so it is leaked rather than freed under it.
      for (AllocState& a : allocs) a.cached = nullptr;
      retired.clear();
    }
    // Backends first: they finish with the memory below (ipc: peers are done
    // with our blocks once our own communications completed).
    // A destructor must not throw: after a device failure (sticky error)
    // teardown calls fail too, and the error that matters was reported.
    auto quietly = [](auto&& fn) {
      try {
        fn();
      } catch (const std::exception&) {
      }
    };
    quietly([&] { backends.clear(); });
    for (AllocState& a : allocs)
      if (a.cached) quietly([&] { dev.deallocate(a.cached); });
    for (void* p : retired) quietly([&] { dev.deallocate(p); });
    if (records) quietly([&] { dev.freeCheckRecords(records); });
  }

  // --------------------------------------------------- peer-mapped memory
  void planPeerMemory(const P2pTrace& trace) {
    routes.resize(static_cast<std::size_t>(plan.world));
    routes_truncated = trace.truncated;
    for (const auto& [pair, messages] : trace.pairs) {
      const auto [from, to] = pair;
      for (const P2pMessage& m : messages) {
        if (!maps_peer_memory[plan.comms[m.send.comm].backend]) continue;
        if (from == rank)
          routes[to].sends.push_back(
              {m.send.comm, m.send.alloc, m.send.offset, m.recv.alloc, m.recv.offset});
        if (to == rank)
          routes[from].recvs.push_back(
              {m.recv.comm, m.recv.alloc, m.recv.offset, m.send.alloc, m.send.offset});
      }
    }
    for (std::size_t pc = 0; pc < plan.code.size(); ++pc)
      if (auto* share = std::get_if<instr::Share>(&plan.code[pc].op))
        shares[static_cast<int>(pc)] = shareSpec(*share, trace);
  }

  ShareSpec shareSpec(const instr::Share& in, const P2pTrace& trace) const {
    const std::set<int> listed(in.comms.begin(), in.comms.end());
    std::set<std::array<int, 4>> links;
    std::set<std::tuple<int, int, int, int>> seen;  // (comm, peer, alloc, peer alloc)
    ShareSpec spec;
    auto addItem = [&](const P2pEnd& mine, const P2pEnd& theirs, int peer) {
      if (!seen.insert({mine.comm, peer, mine.alloc, theirs.alloc}).second) return;
      const PlanComm& c = plan.comms[mine.comm];
      ShareItem item;
      item.comm = mine.comm;
      item.type = c.type;
      item.peer = peer;
      item.alloc = mine.alloc;
      item.peer_alloc = theirs.alloc;
      item.protocol = c.protocol;
      item.name = plan.allocs[mine.alloc].name.c_str();
      spec.items[c.backend].push_back(item);
    };
    for (const auto& [pair, messages] : trace.pairs) {
      const auto [from, to] = pair;
      for (const P2pMessage& m : messages) {
        if (!maps_peer_memory[plan.comms[m.send.comm].backend]) continue;
        if (!listed.count(m.send.comm) && !listed.count(m.recv.comm)) continue;
        links.insert({from, to, m.send.alloc, m.recv.alloc});
        if (from == rank) addItem(m.send, m.recv, to);
        if (to == rank) addItem(m.recv, m.send, from);
      }
    }
    spec.links.assign(links.begin(), links.end());
    return spec;
  }

  // The peer's end of this rank's next message with p.peer (ipc).
  void addRemote(PostArgs& p, int slot) {
    PeerRoutes& r = routes[p.peer];
    const bool send = p.type == CommType::Send;
    const std::vector<Route>& list = send ? r.sends : r.recvs;
    uint64_t& posted = send ? r.sent : r.received;
    const uint64_t seq = posted + 1;
    const bool traced = !list.empty() && (!routes_truncated || seq <= list.size());
    HIR_CHECK(traced,
              "{} rank {} is message #{} of this rank {} rank {}, but the load-time dry run "
              "traced {}{}; backend '{}' needs the peer's address of every message from it",
              send ? "send to" : "recv from", p.peer, seq, send ? "to" : "from", p.peer,
              list.size(), routes_truncated ? " (it stopped early: the plan runs too long)" : "",
              plan.backends[plan.comms[slot].backend]);
    const Route& route = list[(seq - 1) % list.size()];
    const int alloc = send ? p.input_alloc : p.output_alloc;
    const std::size_t offset = send ? p.input_offset : p.output_offset;
    HIR_CHECK(route.comm == slot && route.alloc == alloc && route.offset == offset,
              "message #{} {} rank {} is not the one the load-time dry run traced (a run that "
              "failed part-way leaves the message numbers out of step; create a new evaluator)",
              seq, send ? "to" : "from", p.peer);
    // Both ends' blocks, checked on both ranks, so that both fail alike.
    for (int a : {alloc, route.remote_alloc}) {
      const AllocState& state = allocs[a];
      HIR_CHECK(state.exchanged_generation == state.generation,
                "'{}' got new memory (it was {}) after the last share_mem_handles that covered "
                "it; a share_mem_handles listing this communication must run after the "
                "allocation",
                plan.allocs[a].name,
                state.exchanged_generation == 0 ? "never exchanged"
                                                : "allocated with another size");
    }
    p.remote_alloc = route.remote_alloc;
    p.remote_offset = route.remote_offset;
    p.pair_seq = seq;
    posted = seq;
  }

  // ------------------------------------------------------------- helpers
  std::string loopContext(int node, const int64_t* values = nullptr) const {
    const PlanNode& n = plan.nodes[node];
    std::string out;
    for (std::size_t i = 0; i < n.loop_slots.size(); ++i) {
      int slot = n.loop_slots[i];
      if (!out.empty()) out += ", ";
      out += fmt::format("{}={}", plan.scalar_names[slot], values ? values[i] : scalars[slot]);
    }
    return out;
  }

  std::string where(int node) const {
    std::string ctx = loopContext(node);
    return fmt::format("{}: on rank {}{}", plan.nodes[node].path, rank,
                       ctx.empty() ? "" : fmt::format(" ({})", ctx));
  }

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

  struct Span {
    AllocState* alloc;
    int64_t offset, count;
    char* data(DType t) const {
      return static_cast<char*>(alloc->ptr) + offset * static_cast<int64_t>(dtypeSize(t));
    }
  };

  Span resolve(const PlanRef& r) {
    AllocState& a = allocs[r.alloc];
    const PlanAlloc& pa = plan.allocs[r.alloc];
    HIR_CHECK(a.live, "'{}' uses '{}', which is not allocated", r.text, pa.name);
    HIR_CHECK(r.select.size() + (r.has_range ? 1 : 0) <= a.shape.size(),
              "'{}' has {} indices but '{}' has {} dimensions", r.text,
              r.select.size() + (r.has_range ? 1 : 0), pa.name, a.shape.size());
    int64_t offset = 0;
    std::size_t d = 0;
    for (; d < r.select.size(); ++d) {
      int64_t v = r.select[d].eval(scalars.data());
      HIR_CHECK(v >= 0 && v < a.shape[d], "index {} of '{}' is {}, outside [0, {})", d, r.text,
                v, a.shape[d]);
      offset += v * a.strides[d];
    }
    int64_t count = d < a.shape.size() ? a.shape[d] * a.strides[d] : 1;
    if (r.has_range) {
      int64_t b = r.range_begin.eval(scalars.data()), e = r.range_end.eval(scalars.data());
      HIR_CHECK(0 <= b && b <= e && e <= a.shape[d],
                "range [{}:{}] of '{}' is outside [0, {}] or reversed", b, e, r.text, a.shape[d]);
      offset += b * a.strides[d];
      count = (e - b) * a.strides[d];
    }
    a.stream_mask |= 1u << current;
    return Span{&a, offset, count};
  }

  // ---------------------------------------------------------- instructions
  void doAllocate(const instr::Allocate& in) {
    AllocState& a = allocs[in.alloc];
    const PlanAlloc& pa = plan.allocs[in.alloc];
    HIR_CHECK(!a.live, "'{}' is allocated again without a deallocate", pa.name);
    a.shape.resize(pa.shape.size());
    a.strides.resize(pa.shape.size());
    int64_t elements = 1;
    for (std::size_t d = pa.shape.size(); d-- > 0;) {
      int64_t e = pa.shape[d].eval(scalars.data());
      HIR_CHECK(e >= 0, "extent {} of '{}' is {}; extents are >= 0", d, pa.name, e);
      a.shape[d] = e;
      a.strides[d] = elements;
      elements *= e;
    }
    a.bytes = static_cast<std::size_t>(elements) * dtypeSize(pa.dtype);
    if (a.generation == 0 || a.generation_bytes != a.bytes) {
      ++a.generation;
      a.generation_bytes = a.bytes;
    }
    if (a.bound) {
      HIR_CHECK(a.bound_bytes >= a.bytes,
                "'{}' needs {} bytes but the buffer bound to it holds {}", pa.name, a.bytes,
                a.bound_bytes);
      a.ptr = a.bound;
    } else {
      if (a.cached && a.cached_bytes != a.bytes) {
        // The shape changed: the old block goes once nothing uses it.
        // (Joined posts have no done: stream_mask covers their stream.)
        for (int c : a.comm_users)
          if (comms[c].last_done) dev.synchronize(*comms[c].last_done, opts.timeout);
        for (int k = 0; k < kMaxStreams; ++k)
          if ((a.stream_mask >> k & 1) && streams[k].stream)
            dev.synchronize(*streams[k].stream, opts.timeout);
        // Peers may have mapped an ipc-shared block: it lives until teardown.
        if (pa.ipc_shared)
          retired.push_back(a.cached);
        else
          dev.deallocate(a.cached);
        a.cached = nullptr;
        a.comm_users.clear();
        a.stream_mask = 0;
      }
      if (!a.cached) {
        a.cached = dev.allocate(a.bytes);
        a.cached_bytes = a.bytes;
      }
      a.ptr = a.cached;
    }
    // Reusing a cached block: the current stream first waits for every
    // earlier user (communications and streams), without blocking the host.
    Stream& cur = stream(current);
    for (int c : a.comm_users)
      if (comms[c].last_done) dev.wait(cur, *comms[c].last_done);
    for (int k = 0; k < kMaxStreams; ++k) {
      if (k == current || !(a.stream_mask >> k & 1) || !streams[k].stream) continue;
      dev.record(*streams[k].event, *streams[k].stream);
      dev.wait(cur, *streams[k].event);
    }
    a.comm_users.clear();
    a.stream_mask = 1u << current;
    a.live = true;
  }

  void doDeallocate(const instr::Deallocate& in) {
    AllocState& a = allocs[in.alloc];
    HIR_CHECK(a.live, "'{}' is deallocated but not allocated", plan.allocs[in.alloc].name);
    // The block stays in this node's cache; pending users are waited for
    // when it is reused (stream order) or freed (host, with timeout).
    a.live = false;
  }

  PostArgs makePost(int slot) {
    const PlanComm& c = plan.comms[slot];
    int tsize = static_cast<int>(plan.teams[c.team].ranks.size());
    PostArgs p;
    p.type = c.type;
    p.reduce = c.reduce;
    p.team = c.team;
    p.protocol = c.protocol;
    p.comm = slot;
    p.path = plan.nodes[c.node].path.c_str();
    // Resolves the input or the output (a send's tensor is its input, a
    // recv's its output) and records that this post uses the allocation.
    auto bind = [&](const PlanRef& ref, int& alloc, std::size_t& offset) {
      Span s = resolve(ref);
      p.dtype = plan.allocs[ref.alloc].dtype;
      alloc = ref.alloc;
      offset = static_cast<std::size_t>(s.offset) * dtypeSize(p.dtype);
      s.alloc->comm_users.push_back(slot);
      return std::pair<char*, int64_t>{s.data(p.dtype), s.count};
    };
    int64_t in_count = 0, out_count = 0;
    if (c.input) std::tie(p.input, in_count) = bind(*c.input, p.input_alloc, p.input_offset);
    if (c.output) std::tie(p.output, out_count) = bind(*c.output, p.output_alloc, p.output_offset);
    if (c.root) {
      int64_t root = c.root->eval(scalars.data());
      const auto& ranks = plan.teams[c.team].ranks;
      auto it = std::find(ranks.begin(), ranks.end(), root);
      HIR_CHECK(it != ranks.end(), "root {} is not in the team of {} ranks", root, ranks.size());
      p.root = static_cast<int>(it - ranks.begin());
    }
    if (c.peer) {
      int64_t peer = c.peer->eval(scalars.data());
      HIR_CHECK(peer >= 0 && peer < plan.world, "peer '{}' is {}, outside the world [0, {})",
                c.peer->text(), peer, plan.world);
      p.peer = static_cast<int>(peer);
    }
    auto expect = [&](bool ok, int64_t want, std::string_view what) {
      HIR_CHECK(ok, "{} of {} needs {} elements for a team of {}, found input {} and output {}",
                toString(c.type), what, want, tsize, in_count, out_count);
    };
    switch (c.type) {
      case CommType::Allgather:
      case CommType::Gather:
        expect(out_count == in_count * tsize, in_count * tsize, "output");
        p.count = in_count;
        break;
      case CommType::ReduceScatter:
      case CommType::Scatter:
        expect(in_count == out_count * tsize, out_count * tsize, "input");
        p.count = out_count;
        break;
      case CommType::Allreduce:
      case CommType::Broadcast:
      case CommType::Reduce:
        expect(in_count == out_count, in_count, "output");
        p.count = in_count;
        break;
      case CommType::Alltoall:
        expect(in_count == out_count && in_count % tsize == 0, in_count, "output");
        p.count = in_count / tsize;
        break;
      case CommType::Send:
        p.count = in_count;
        break;
      case CommType::Recv:
        p.count = out_count;
        break;
    }
    if (maps_peer_memory[c.backend] && isPointToPoint(c.type)) addRemote(p, slot);
    return p;
  }

  void markPosted(int slot) {
    if (comms[slot].posted_this_run) return;
    comms[slot].posted_this_run = true;
    posted_this_run.push_back(slot);
  }

  void rememberLoop(CommState& cs, int node) {
    const auto& slots = plan.nodes[node].loop_slots;
    for (std::size_t i = 0; i < slots.size() && i < kMaxLoopDepth; ++i)
      cs.loop_values[i] = scalars[slots[i]];
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

  void doPost(const instr::Post& in) {
    const PlanComm& c = plan.comms[in.comm];
    CommState& cs = comms[in.comm];
    if (team_rank[c.team] < 0) {  // not a member: skip the node
      cs.state = PostState::Skipped;
      return;
    }
    PostArgs p = makePost(in.comm);
    rememberLoop(cs, c.node);
    if (c.group >= 0 && groups[c.group].collecting) {
      GroupState& g = groups[c.group];
      g.ops.push_back(p);
      g.comms.push_back(in.comm);
      cs.last_done = g.done.get();
    } else {
      cs.joined_on =
          postUnit(*backends[c.backend], std::span<const PostArgs>(&p, 1), *cs.done, in.joined);
      cs.last_done = cs.joined_on >= 0 ? nullptr : cs.done.get();
      markPosted(in.comm);
    }
    cs.state = PostState::Posted;
    cs.pending = true;
  }

  void doGroupEnd(const instr::GroupEnd& in) {
    GroupState& g = groups[in.group];
    g.collecting = false;
    if (g.ops.empty()) {
      g.state = PostState::Skipped;
      return;
    }
    int backend = plan.groups[in.group].backend;
    g.joined_on = postUnit(*backends[backend], g.ops, *g.done, in.joined);
    g.state = PostState::Posted;
    for (int c : g.comms) {
      markPosted(c);
      comms[c].joined_on = g.joined_on;
      if (g.joined_on >= 0) comms[c].last_done = nullptr;
    }
  }

  void doWait(const instr::Wait& in) {
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
                            where(c.node), c.name, cs.joined_on, current, toString(in.mode));
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
                          where(pg.node), pg.name, g.joined_on, current, toString(in.mode));
      backends[pg.backend]->wait(*g.done, cur, in.mode, opts.timeout);
    }
    for (int c : g.comms) comms[c].pending = false;
  }

  int streamIndex(const CompiledExpr& e) {
    int64_t k = e.eval(scalars.data());
    HIR_CHECK(k >= 0 && k < kMaxStreams, "stream '{}' is {}, outside [0, {})", e.text(), k,
              kMaxStreams);
    return static_cast<int>(k);
  }

  // Collective: every rank reaches the same decision (see ShareSpec) and, if
  // the exchange is needed, calls every backend that maps peer memory, also
  // with no items of its own.
  void doShare(int pc) {
    auto it = shares.find(pc);
    if (it == shares.end()) return;
    const ShareSpec& spec = it->second;
    std::vector<std::array<uint64_t, 6>> keys;
    for (const auto& [from, to, send_alloc, recv_alloc] : spec.links)
      keys.push_back({static_cast<uint64_t>(from), static_cast<uint64_t>(to),
                      static_cast<uint64_t>(send_alloc), static_cast<uint64_t>(recv_alloc),
                      allocs[send_alloc].generation, allocs[recv_alloc].generation});
    if (std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return exchanged.count(k); }))
      return;
    for (std::size_t b = 0; b < backends.size(); ++b) {
      if (!maps_peer_memory[b]) continue;
      auto items = spec.items.find(static_cast<int>(b));
      std::vector<ShareItem> mine;
      if (items != spec.items.end()) mine = items->second;
      for (ShareItem& item : mine) {
        const AllocState& a = allocs[item.alloc];
        item.caller_owned = a.bound != nullptr;
        item.base = a.bound ? a.bound : a.cached;
        item.bytes = a.bound ? a.bound_bytes : a.cached_bytes;
      }
      backends[b]->shareMemHandles(mine);
    }
    ++exchanges;
    exchanged.insert(keys.begin(), keys.end());
    for (const auto& link : spec.links)
      for (int slot : {link[2], link[3]})
        allocs[slot].exchanged_generation = allocs[slot].generation;
  }

  void doCheck(const instr::Check& in) {
    Span s = resolve(in.ref);
    DType t = plan.allocs[in.ref.alloc].dtype;
    int64_t exec = check_executions[in.check]++;
    if (exec < kMaxCheckContexts) {
      for (int slot : plan.nodes[plan.checks[in.check].node].loop_slots)
        check_contexts[in.check].push_back(scalars[slot]);
    }
    dev.check(stream(current), s.data(t), t, static_cast<std::size_t>(s.count),
              in.value.eval(scalars.data()), in.step.eval(scalars.data()), in.tolerance,
              &records[in.check], exec);
  }

  // Runs instruction `pc`, returns the next pc.
  int step(int pc) {
    const Instr& ins = plan.code[pc];
    return std::visit(
        Overloaded{
            [&](const instr::Allocate& in) { doAllocate(in); return pc + 1; },
            [&](const instr::Deallocate& in) { doDeallocate(in); return pc + 1; },
            [&](const instr::Post& in) { doPost(in); return pc + 1; },
            [&](const instr::GroupBegin& in) {
              GroupState& g = groups[in.group];
              g.collecting = true;
              g.ops.clear();
              g.comms.clear();
              return pc + 1;
            },
            [&](const instr::GroupEnd& in) { doGroupEnd(in); return pc + 1; },
            [&](const instr::Share&) { doShare(pc); return pc + 1; },
            [&](const instr::Wait& in) { doWait(in); return pc + 1; },
            [&](const instr::LoopInit& in) {
              int64_t start = in.start.eval(scalars.data());
              int64_t stop = in.stop.eval(scalars.data());
              int64_t st = in.step.eval(scalars.data());
              HIR_CHECK(st > 0, "loop step '{}' is {}; it must be positive", in.step.text(), st);
              scalars[in.slot] = start;
              scalars[in.stop_slot] = stop;
              scalars[in.step_slot] = st;
              return start < stop ? pc + 1 : in.exit;
            },
            [&](const instr::LoopNext& in) {
              int64_t v = (scalars[in.slot] += scalars[in.step_slot]);
              return v < scalars[in.stop_slot] ? in.body : pc + 1;
            },
            [&](const instr::JumpIfZero& in) {
              return in.cond.eval(scalars.data()) == 0 ? in.target : pc + 1;
            },
            [&](const instr::Jump& in) { return in.target; },
            [&](const instr::SetStream& in) {
              current = streamIndex(in.stream);
              stream(current);
              return pc + 1;
            },
            [&](const instr::SyncStream& in) {
              int k = streamIndex(in.stream);
              if (k != current && streams[k].used_this_run) {
                dev.record(*streams[k].event, *streams[k].stream);
                dev.wait(stream(current), *streams[k].event);
              }
              return pc + 1;
            },
            [&](const instr::Fill& in) {
              Span s = resolve(in.ref);
              DType t = plan.allocs[in.ref.alloc].dtype;
              dev.fill(stream(current), s.data(t), t, static_cast<std::size_t>(s.count),
                       in.value.eval(scalars.data()), in.step.eval(scalars.data()));
              return pc + 1;
            },
            [&](const instr::Copy& in) {
              Span src = resolve(in.src);
              Span dst = resolve(in.dst);
              DType t = plan.allocs[in.src.alloc].dtype;
              HIR_CHECK(src.count == dst.count, "copy from '{}' ({} elements) to '{}' ({})",
                        in.src.text, src.count, in.dst.text, dst.count);
              dev.copy(stream(current), dst.data(t), src.data(t),
                       static_cast<std::size_t>(src.count) * dtypeSize(t));
              return pc + 1;
            },
            [&](const instr::Check& in) { doCheck(in); return pc + 1; },
        },
        ins.op);
  }

  // ------------------------------------------------------------------ run
  void run(void* native) {
    Stream* s0;
    if (native == nullptr) {
      s0 = &dev.defaultStream();
    } else {
      auto& w = wrapped[native];
      if (!w) w = dev.wrapStream(native);
      s0 = w.get();
    }
    streams[0].stream = s0;
    for (StreamState& s : streams) s.used_this_run = false;
    current = 0;
    dev.record(*run_start, stream(0));
    scalars = plan.scalar_init;
    scalars[kRankSlot] = rank;
    for (int c : posted_this_run) comms[c].posted_this_run = false;  // after a failed run
    posted_this_run.clear();

    const int end = static_cast<int>(plan.code.size());
    int pc = 0;
    try {
      while (pc < end) pc = step(pc);
    } catch (const ProgramError& e) {
      throw ProgramError(fmt::format("{}: {}", where(plan.code[pc].node), e.what()));
    } catch (const TimeoutError& e) {
      // A host-mode wait ran out of time: say where, and what is pending.
      throw TimeoutError(
          fmt::format("{}: {}\n{}", where(plan.code[pc].node), e.what(), pendingReport()));
    } catch (const BackendError& e) {
      // The same, when a backend's own timeout or a device failure came first.
      throw BackendError(
          fmt::format("{}: {}\n{}", where(plan.code[pc].node), e.what(), pendingReport()));
    }
    finishRun();
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
    for (AllocState& a : allocs) a.live = false;  // back to the cache
  }

  void synchronize() {
    try {
      // One deadline for all: a stuck run fails after `timeout`, not after
      // a timeout per stream.
      const auto start = std::chrono::steady_clock::now();
      for (StreamState& s : streams)
        if (s.stream) dev.synchronize(*s.stream, remainingOf(opts.timeout, start));
      for (CommState& c : comms)
        if (c.last_done) dev.synchronize(*c.last_done, remainingOf(opts.timeout, start));
    } catch (const TimeoutError& e) {
      throw TimeoutError(fmt::format("{}\n{}", e.what(), pendingReport()));
    }
    for (CommState& c : comms) c.pending = false;
  }

  // What this rank still waits for, with node paths and loop indices. A
  // joined post has no done: it is listed while its stream has not finished.
  std::string pendingReport() {
    std::string out = fmt::format("rank {}: pending communications:", rank);
    std::array<int, kMaxStreams> stream_busy;
    stream_busy.fill(-1);  // -1: not asked yet, 0: finished, 1: busy
    auto busy = [&](int k) {
      if (stream_busy[k] < 0) {
        stream_busy[k] = 0;
        try {
          if (streams[k].stream && streams[k].event) {
            dev.record(*streams[k].event, *streams[k].stream);
            stream_busy[k] = dev.query(*streams[k].event) ? 0 : 1;
          }
        } catch (const std::exception&) {
          stream_busy[k] = 1;
        }
      }
      return stream_busy[k] == 1;
    };
    int n = 0;
    for (std::size_t i = 0; i < comms.size(); ++i) {
      CommState& c = comms[i];
      if (c.state != PostState::Posted) continue;
      bool done = false;
      if (c.last_done) {
        try {
          done = dev.query(*c.last_done);
        } catch (const std::exception&) {
        }
      } else {
        done = c.joined_on < 0 || !busy(c.joined_on);
      }
      if (done) continue;
      const PlanComm& pc = plan.comms[i];
      std::string ctx = loopContext(pc.node, c.loop_values.data());
      out += fmt::format("\n  '{}' ({}) at {}{}{}", pc.name, toString(pc.type),
                         plan.nodes[pc.node].path, ctx.empty() ? "" : " (" + ctx + ")",
                         c.last_done ? ""
                                     : fmt::format(", on stream {}, which has not finished",
                                                   c.joined_on));
      ++n;
    }
    if (n == 0) out += " none (a stream is stuck on other work)";
    return out;
  }

  RunReport report() const {
    RunReport r;
    for (std::size_t i = 0; i < plan.checks.size(); ++i) {
      const CheckRecord& rec = records[i];
      r.checks_run += static_cast<uint64_t>(check_executions[i]);
      r.elements_checked += rec.checked;
      if (rec.mismatches == 0) continue;
      const PlanNode& node = plan.nodes[plan.checks[i].node];
      CheckFailure f;
      f.rank = rank;
      f.path = node.path;
      f.tensor = plan.checks[i].tensor;
      f.mismatches = rec.mismatches;
      int64_t exec = rec.first_execution;
      std::size_t depth = node.loop_slots.size();
      if (exec >= 0 && exec < kMaxCheckContexts && depth > 0 &&
          (exec + 1) * static_cast<int64_t>(depth) <=
              static_cast<int64_t>(check_contexts[i].size())) {
        const int64_t* v = &check_contexts[i][exec * depth];
        f.context = loopContext(plan.checks[i].node, v);
      } else if (exec >= 0 && depth > 0) {
        f.context = fmt::format("execution #{}", exec);
      }
      for (int k = 0; k < rec.reported && k < CheckRecord::kMaxReported; ++k)
        f.first.push_back({rec.index[k], rec.got[k], rec.expected[k]});
      r.failures.push_back(std::move(f));
    }
    return r;
  }
};

// ------------------------------------------------------------------- API
Evaluator::Evaluator(Session& session, const Program& program, const EvaluatorOptions& options)
    : impl_(std::make_unique<Impl>(session, program, options)) {}

Evaluator::~Evaluator() = default;

void Evaluator::bind(std::string_view name, void* data, std::size_t bytes) {
  const Plan& p = impl_->plan;
  for (std::size_t i = 0; i < p.allocs.size(); ++i) {
    if (p.allocs[i].name != name) continue;
    HIR_CHECK(p.allocs[i].bindable,
              "bind('{}'): '{}' is not listed in the program's inputs or outputs", name, name);
    HIR_CHECK(data != nullptr || bytes == 0, "bind('{}'): null buffer", name);
    Impl::AllocState& a = impl_->allocs[i];
    a.bound = data;
    a.bound_bytes = bytes;
    return;
  }
  throw ProgramError(fmt::format("bind('{}'): the program has no allocation named '{}'", name,
                                 name));
}

void Evaluator::run(void* stream) { impl_->run(stream); }
void Evaluator::synchronize() { impl_->synchronize(); }
RunReport Evaluator::report() const { return impl_->report(); }
const Plan& Evaluator::plan() const { return impl_->plan; }
int64_t Evaluator::exchanges() const { return impl_->exchanges; }

std::string RunReport::format() const {
  std::string out;
  for (const CheckFailure& f : failures) {
    out += fmt::format("rank {}: check failed at {}{}: '{}' has {} wrong element{}", f.rank,
                       f.path, f.context.empty() ? "" : " (" + f.context + ")", f.tensor,
                       f.mismatches, f.mismatches == 1 ? "" : "s");
    for (const auto& e : f.first)
      out += fmt::format("; [{}] got {} expected {}", e.index, e.got, e.expected);
    out += '\n';
  }
  return out;
}

}  // namespace hir
