// The ipc backend's overrides of Backend (see ipc_backend.h and
// docs/ipc.md): posts, abort and teardown over the state of state.h.
//
// A message from s to r with sequence number q (PostArgs::remote.pair_seq) moves
// like this, each side on its stream for (peer, direction), after the
// stream waited for the inputs to be ready on the poster's current stream:
//
//   put  receiver r: signal s.page[r][PutFree] = q;  wait r.page[s][PutDone] >= q
//        sender   s: wait s.page[r][PutFree] >= q;   copy s.buf -> r.buf;
//                    signal r.page[s][PutDone] = q
//   get  sender   s: signal r.page[s][GetReady] = q; wait s.page[r][GetConsumed] >= q
//        receiver r: wait r.page[s][GetReady] >= q;  copy s.buf -> r.buf;
//                    signal s.page[r][GetConsumed] = q
//
//   eager (small messages, numbered e per lane among eager messages; see
//   resolveEager): the sender copies into slot e % slots of the receiver's
//   page and signals EagerDone; the receiver copies out, signals EagerFree
//
// where x.page[w][k] is counter w * 6 + k of rank x's signal page, written
// only by rank w. The side that copies maps the other's buffer ("imports");
// the other side's buffer is "exported". Every counter only grows (modulo
// 2^32: q is the message's number plus HIR_IPC_SEQ_START, 0 unless a test
// starts near the wrap, and every wait compares cyclically,
// (int32)(value - q) >= 0, as cuStreamWaitValue32 does), so a wait for >= q
// is satisfied by q or any later message, which comes after q on both
// sides: the messages of one pair and direction (a lane) run in order, on
// the lane's stream, or on a poster's stream (postJoined) after the lane's
// earlier messages.
//
// Counted mode (graph mode, BackendContext::graph; HIR_IPC_COUNTED=1 for
// tests): q is not written into the work by the host but counted on the
// device, one counter per lane and rank (DeviceMessages::countedStep), so that a
// graph's replays of the same work go on numbering. Both ends of a lane count
// its messages in the same order, from the same start, so they agree on q
// as the host's numbers do. A release word ends every counted wait on
#include "backends/ipc/ipc_backend.h"

#include <algorithm>
#include <chrono>

#include "backends/ipc/state.h"
#include "backends/post_checks.h"
#include "common/log.h"

namespace hir::ipc {

// Every counter of our page for a peer to 2^30 past the latest message
// number posted with that peer, which satisfies each of our waits on it
// under the cyclic compare, (int32)(value - q) >= 0: streams stuck on a peer
// that will never signal then drain. Written as semaphores are (writeValue,
// not a fill: a wait may be polling the word, and only a semaphore write is
// an atomic store for it). Failure path only: the messages it releases
// carry no data.
void State::unblock() {
  if (page == nullptr || control == nullptr || latest == nullptr || latest_eager == nullptr) return;
  // Counted waits compare with the device's numbers, which the host may not
  // know (a graph's replays): they end on the release word instead.
  if (counts != nullptr) dev->writeValue(*control, releaseWord(), 1);
  for (int p = 0; p < world; ++p) {
    const std::size_t i = static_cast<std::size_t>(p);
    const uint32_t v = latest[i].load(std::memory_order_relaxed) + (uint32_t{1} << 30);
    const uint32_t e = latest_eager[i].load(std::memory_order_relaxed) + (uint32_t{1} << 30);
    for (int k = 0; k < kSignals; ++k)
      if (k != kEagerPosted)  // a push waiting for its slot ends on kEagerFree (and not direct)
        dev->writeValue(*control, page + i * kSignals + k,
                        k == kEagerDone || k == kEagerFree ? e : v);
  }
}

void State::shutdown() noexcept {
  if (dev == nullptr) return;
  std::vector<Stream*> all;
  std::vector<Event*> tails;  // of lanes whose last messages ran on a poster's stream
  for (auto* lanes : {&send_lanes, &recv_lanes})
    for (Lane& l : *lanes) {
      all.push_back(l.stream.get());
      if (l.on != nullptr && l.on != l.stream.get()) tails.push_back(l.tail.get());
    }
  all.push_back(join.get());
  for (auto& s : phased) all.push_back(s.get());
  for (auto& [on, a] : asides) all.push_back(a.stream.get());
  all.push_back(control.get());
  // All streams share one deadline: a stuck lane must not cost a timeout
  // per stream.
  auto drain = [&](Duration limit) {
    const auto start = std::chrono::steady_clock::now();
    bool ok = true;
    auto quietly = [&](auto&& fn) {
      try {
        fn();
      } catch (...) {
        ok = false;  // reported where the run failed
      }
    };
    for (Stream* s : all)
      if (s != nullptr) quietly([&] { dev->synchronize(*s, remainingOf(limit, start)); });
    for (Event* e : tails) quietly([&] { dev->synchronize(*e, remainingOf(limit, start)); });
    return ok;
  };
  // Our communications completed: by the protocol, no peer touches our page
  // or our exported blocks any more, and we touch none of theirs. After an
  // abort nothing is waited for: the run failed, and abort() released our
  // waits already.
  const bool clean = !aborted.load() && drain(ctx.timeout);
  if (!clean) {
    try {
      unblock();
    } catch (...) {
    }
    // Our own waits are released: the streams only finish what they are
    // doing (a failed device skips the rest).
    drain(kReleaseDrain);
  }
  send_lanes.clear();
  recv_lanes.clear();
  join.reset();
  phased.clear();
  asides.clear();
  control.reset();
  joined.reset();
  ready.reset();
  if (!clean) return;  // a peer may still write into our page: leave it, and its mappings
  try {
    for (const std::vector<Import>& of_peer : imports)
      for (const Import& im : of_peer)
        if (im.ptr != nullptr && !im.own) dev->closeImported(im.ptr);
    for (void* p : retired) dev->closeImported(p);
    for (void* p : mapped_pages) dev->closeImported(p);
    dev->deallocate(page);
    if (counts != nullptr) dev->deallocate(counts);
  } catch (...) {
    // Teardown goes on; the device reports its own failures at the next use.
  }
}

}  // namespace hir::ipc

namespace hir {

using namespace ipc;

IpcBackend::IpcBackend() : state_(std::make_unique<ipc::State>()) {}

IpcBackend::~IpcBackend() { state_->shutdown(); }

// Point-to-point messages through peer-mapped memory of the host or cuda
// device, every dtype, on one node. "auto" never picks it: its
// communications need handles exchanged, which a program asks for by naming
// it.
BackendCaps IpcBackend::caps() {
  BackendCaps c;
  c.name = "ipc";
  c.devices = {"host", "cuda"};
  c.types = {CommType::Send,      CommType::Recv,      CommType::Allgather, CommType::Broadcast,
             CommType::Alltoall,  CommType::Allreduce, CommType::ReduceScatter};
  c.dtypes = EnumSet<DType>::all(kDTypeNames);
  c.reduce_ops = EnumSet<ReduceOp>::all(kReduceOpNames);
  c.protocols = {Protocol::Put, Protocol::Get, Protocol::Eager};
  c.resolve_protocol = &ipcResolveProtocol;
  c.maps_peer_memory = true;
  c.collective_messages = &ipcCollectiveMessages;
  c.eager_slots = &ipcEagerSlotsFor;
  c.same_node_only = true;
  c.post_order = PostOrder::kPerPeer;  // one lane per ordered pair of ranks
  c.rank_spaces = {RankSpace::Processes};  // CUDA IPC handles do not open in their exporter
  c.capturable = true;  // in graph mode its message numbers are counted on the device
  c.auto_priority = 0;
  return c;
}

void IpcBackend::post(std::span<const PostArgs> ops, Stream& current, Event& done) {
  State& st = *state_;
  checkPostable("ipc", ops, st.dev != nullptr, st.aborted.load(), st.rank);
  HIR_INTERNAL_ASSERT(!ops.empty(), "ipc: empty post");
  Device& d = *st.dev;
  // Posts re-record the shared events and may create a pair's stream.
  std::lock_guard lock(st.post_mutex);
  // A collective: its phases on its team's stream, after `current`.
  const auto first = std::find_if(ops.begin(), ops.end(),
                                  [](const PostArgs& a) { return !isPointToPoint(a.type); });
  if (first != ops.end()) {
    d.record(*st.ready, current);
    std::unique_ptr<Stream>& on = st.phased[static_cast<std::size_t>(first->team)];
    if (!on) on = d.createStream();
    d.wait(*on, *st.ready);
    st.enqueueOnStream(ops, *on, &current);
    d.record(done, *on);
    return;
  }
  // One message, the usual case: no allocation on the way.
  if (ops.size() == 1) {
    const Step s = st.resolve(ops[0]);
    d.record(*st.ready, current);
    st.enqueue(s, current);
    d.record(done, *s.lane->stream);
    return;
  }
  Work& w = st.work;
  w.clear();
  for (const PostArgs& a : ops) w.steps.push_back(st.resolve(a));
  st.enqueueDetached(w, current, done);
}

// Everything on `current` (enqueuePhased), unless a lane has more eager
// sends than slots: then, without a collective, as post() does (each lane
// on its own stream).
bool IpcBackend::postJoined(std::span<const PostArgs> ops, Stream& current, Event& done) {
  State& st = *state_;
  checkPostable("ipc", ops, st.dev != nullptr, st.aborted.load(), st.rank);
  HIR_INTERNAL_ASSERT(!ops.empty(), "ipc: empty post");
  std::lock_guard lock(st.post_mutex);
  const bool collective = std::any_of(ops.begin(), ops.end(),
                                      [](const PostArgs& a) { return !isPointToPoint(a.type); });
  if (collective || st.eagerLoad(ops) <= st.eager_slots) {
    st.enqueueOnStream(ops, current, nullptr);
    return true;  // no `done`: the lanes' tails order later messages
  }
  Work& w = st.work;
  w.clear();
  for (const PostArgs& a : ops) w.steps.push_back(st.resolve(a));
  st.enqueueDetached(w, current, done);
  return false;
}

// From any thread (the evaluator's watchdog): touches only the page, through
// the device, which is thread-safe.
void IpcBackend::abort() {
  HIR_LOG_INFO(Subsys::Ipc, "aborted: releasing this rank's semaphore waits");
  state_->aborted.store(true);
  try {
    state_->unblock();
  } catch (...) {
  }
}

void IpcBackend::setCapturing(bool) {
  State& st = *state_;
  std::lock_guard lock(st.post_mutex);
  HIR_INTERNAL_ASSERT(st.counted, "ipc: a graph capture without graph mode at setup (its message "
                      "numbers would repeat in every replay)");
  for (auto* lanes : {&st.send_lanes, &st.recv_lanes})
    for (Lane& l : *lanes) l.on = nullptr;
}

int64_t IpcBackend::exchanges() const { return state_->exchanges; }
std::size_t IpcBackend::eagerSlotBytes() const { return state_->slot_bytes; }
uint32_t IpcBackend::eagerSlots() const { return state_->eager_slots; }

void registerIpcBackend() {
  registerBackend({IpcBackend::caps(), [] { return std::make_unique<IpcBackend>(); }});
}

}  // namespace hir
