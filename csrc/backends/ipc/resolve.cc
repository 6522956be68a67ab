// How the ops of a post become the steps of the protocol (state.h): a
// send's or recv's message resolved against the peer's page and mapped
// blocks (resolve), eager messages through the receiver's slots or
// straight into its buffer (resolveEager), a collective's messages and
// local part (addCollective), and a step as a device message-step part.
#include <algorithm>
#include <cstring>

#include "backends/ipc/state.h"
#include "common/log.h"

namespace hir::ipc {

Step State::resolve(const PostArgs& a) {
  HIR_INTERNAL_ASSERT(isPointToPoint(a.type), "{}: ipc bound to {}", a.path, toString(a.type));
  HIR_INTERNAL_ASSERT(a.peer >= 0 && a.peer < world, "{}: peer {} outside the world", a.path,
                      a.peer);
  HIR_INTERNAL_ASSERT(a.remote.pair_seq >= 1 && a.remote.alloc >= 0,
                      "ipc: {}: {} rank {} was posted without the peer's address "
                      "(PostArgs::remote), which the evaluator fills from the load-time trace",
                      a.path, direction(a.type), a.peer);
  uint32_t* peer_page = peer_pages[a.peer];
  HIR_CHECK(peer_page != nullptr,
            "ipc: {}: {} rank {} before any share_mem_handles exchanged with rank {}; list this "
            "communication in a share_mem_handles that runs before it",
            a.path, direction(a.type), a.peer, a.peer);
  const bool get = isGet(a.protocol);
  const int me = rank, peer = a.peer;
  Step s;
  s.lane = &laneFor(a.type, peer);
  if (a.protocol == Protocol::Eager) return resolveEager(a, s, peer_page);
  if (counted)
    s.counter = counts + (a.type == CommType::Send ? 0 : world) + static_cast<std::size_t>(peer);
  // Modulo 2^32: the waits compare cyclically.
  s.seq = s.wait_seq = static_cast<uint32_t>(seq_start + a.remote.pair_seq);
  std::atomic<uint32_t>& l = latest[static_cast<std::size_t>(peer)];
  if (static_cast<int32_t>(s.seq - l.load(std::memory_order_relaxed)) > 0)
    l.store(s.seq, std::memory_order_relaxed);
  s.bytes = a.count * dtypeSize(a.dtype);
  s.copies = !exportsBuffer(a.type, a.protocol);
  const bool send = a.type == CommType::Send;
  // Our counters for this message are the ones the peer writes: as the
  // sender, the receiver's "free"/"consumed"; as the receiver, the sender's
  // "done"/"ready". The peer's counter is the one we write.
  const Signal ours = send ? (get ? kGetConsumed : kPutFree) : (get ? kGetReady : kPutDone);
  const Signal theirs = send ? (get ? kGetReady : kPutDone) : (get ? kGetConsumed : kPutFree);
  s.await = page + peer * kSignals + ours;
  s.signal = peer_page + me * kSignals + theirs;
  if (!s.copies) return s;
  const Import* im = importOf(peer, a.remote.alloc);
  HIR_CHECK(im != nullptr,
            "ipc: {}: {} rank {} ({}): rank {}'s allocation #{} was never exchanged; a "
            "share_mem_handles listing this communication must run after that allocation and "
            "before this post",
            a.path, direction(a.type), peer, toString(get ? Protocol::Get : Protocol::Put), peer,
            a.remote.alloc);
  // The load-time trace placed the message in the peer's block; a peer
  // whose block is smaller (another program or other params on that rank,
  // which a check of one rank's view cannot see) must not be written past.
  HIR_CHECK(im->holds(a.remote.offset, s.bytes),
            "ipc: {}: {} rank {} ({}) of {} bytes at byte {} of rank {}'s allocation #{}, which "
            "has {} bytes: the ranks disagree on the message (do they run the same program with "
            "the same params?)",
            a.path, direction(a.type), peer, toString(get ? Protocol::Get : Protocol::Put),
            s.bytes, a.remote.offset, peer, a.remote.alloc, im->bytes);
  char* remote = static_cast<char*>(im->ptr) + a.remote.offset;
  if (send) {
    s.dst = remote;
    s.src = a.input;
  } else {
    s.dst = a.output;
    s.src = remote;
  }
  return s;
}

// An eager message e (numbered per lane among eager messages) goes through
// slot e % eager_slots of the receiver's page, of the sender's row:
//   sender   s: wait s.page[r][EagerFree] >= e - slots (the slot's previous
//               message was copied out); copy s.buf -> the slot (mapped);
//               signal r.page[s][EagerDone] = e
//   receiver r: wait r.page[s][EagerDone] >= e; copy the slot -> r.buf;
//               signal s.page[r][EagerFree] = e
// Both sides copy, each as one signaledCopy (one kernel on cuda). The
// sender needs no answer from the receiver for this message, and no buffer
// of either side is mapped: only the pages.
Step State::resolveEager(const PostArgs& a, Step s, uint32_t* peer_page) {
  const int me = rank, peer = a.peer;
  const bool send = a.type == CommType::Send;
  s.bytes = a.count * dtypeSize(a.dtype);
  HIR_CHECK(s.bytes <= slot_bytes,
            "ipc: {}: {} rank {}: an eager message of {} bytes, above the {}-byte eager slots "
            "sized when this backend started (HIR_IPC_EAGER_MAX, HIR_IPC_EAGER_SEND_MAX and "
            "the largest eager message of the program's trace)",
            a.path, direction(a.type), peer, s.bytes, slot_bytes);
  s.copies = true;
  s.early = send;
  s.eager = true;
  Lane& lane = *s.lane;
  s.seq = ++lane.eager;
  std::atomic<uint32_t>& l = latest_eager[static_cast<std::size_t>(peer)];
  if (static_cast<int32_t>(s.seq - l.load(std::memory_order_relaxed)) > 0)
    l.store(s.seq, std::memory_order_relaxed);
  const std::size_t slot = s.seq & (eager_slots - 1);
  if (counted) {
    s.counter = counts + (send ? 2 : 3) * static_cast<std::size_t>(world) +
                static_cast<std::size_t>(peer);
    s.slots = eager_slots;
  }
  // In lines, the receiver waits for the lines' flags, not for "done". The
  // sender still stores "done" (the device orders nothing before it then),
  // so that the lane's next message not in lines compares with a recent
  // number.
  s.inline_flags = s.bytes > 0 && s.bytes <= inline_max;
  // The sender writes our row of the peer's page, the receiver reads the
  // peer's row of its own, in the slot or, for lines, in the slot's line
  // area; counted steps find the slot on the device.
  char* ring = (send ? slotsOf(peer_page, me) : slotsOf(page, peer)) +
               (s.inline_flags ? slot_bytes : 0);
  char* at = counted ? ring : ring + slot * slot_stride;
  const std::size_t stride = counted ? slot_stride : 0;
  s.await = page + peer * kSignals + (send ? kEagerFree : kEagerDone);
  s.signal = peer_page + me * kSignals + (send ? kEagerDone : kEagerFree);
  if (s.inline_flags && !send) s.await = nullptr;
  if (send) {
    s.wait_seq = s.seq - eager_slots;  // the slot's previous message was copied out
    s.wait_back = eager_slots;
    s.src = a.input;
    s.dst = at;
    s.dst_stride = stride;
  } else {
    s.wait_seq = s.seq;
    s.src = at;
    s.src_stride = stride;
    s.dst = a.output;
  }
  // Direct delivery (not in lines, which carry their own flags): the
  // receiver posts e into our page's kEagerPosted once its buffer is free;
  // a sender that sees it writes straight into that buffer (when it mapped
  // it: caller-bound buffers are not shared) and marks the message, so the
  // receiver skips its copy out of the slot. The marks are the receiver's,
  // one per slot of the sender's row.
  if (direct && !s.inline_flags && s.bytes > 0) {
    uint32_t* marks = send ? marksOf(peer_page, me) : marksOf(page, peer);
    s.mark = counted ? marks : marks + slot;
    if (send) {
      s.posted = page + peer * kSignals + kEagerPosted;
      // Never past the receiver's block (ranks that disagree on the message,
      // see resolve()): such a message goes through the slot, which the
      // receiver copies out by its own view of the message.
      const Import* im = importOf(peer, a.remote.alloc);
      if (im != nullptr && im->holds(a.remote.offset, s.bytes))
        s.direct = static_cast<char*>(im->ptr) + a.remote.offset;
      else
        s.mark = s.posted = nullptr;
    } else {
      s.posted = peer_page + me * kSignals + kEagerPosted;
    }
  }
  return s;
}

void State::add(const PostArgs& a, Work& w) {
  if (!isPointToPoint(a.type)) return addCollective(a, w);
  w.steps.push_back(resolve(a));
  addLane(w.lanes, w.steps.back().lane);
}

// The collective's messages (PostArgs::pieces, as ipcCollectiveMessages
// lists them) become steps like a send's or a recv's; what needs no peer
// (the member's own chunk) is a local copy or a source of the reduction.
void State::addCollective(const PostArgs& a, Work& w) {
  const std::vector<int>& team = ctx.teams[static_cast<std::size_t>(a.team)];
  const int n = static_cast<int>(team.size());
  const int me = static_cast<int>(std::find(team.begin(), team.end(), rank) - team.begin());
  HIR_INTERNAL_ASSERT(me < n, "ipc: {}: rank {} posted a collective of a team it is not in",
                      a.path, rank);
  HIR_INTERNAL_ASSERT(n == 1 || !a.pieces.empty(),
                      "ipc: {}: {} posted without its messages (PostArgs::pieces), which the "
                      "evaluator fills from the load-time trace",
                      a.path, toString(a.type));
  const std::size_t size = dtypeSize(a.dtype), c = a.count;
  const auto* in = static_cast<const char*>(a.input);
  auto* out = static_cast<char*>(a.output);
  const bool reduction = hasReduceOp(a.type);
  ReduceUnit unit;
  std::size_t own_offset = a.type == CommType::ReduceScatter ? me * c : 0;  // n == 1: all of it
  if (reduction) {
    HIR_CHECK_AS(BackendError, dev->supports(DeviceFeature::Reduce),
                 "ipc: {}: {} needs reductions on the device, which {} does not offer", a.path,
                 toString(a.type), dev->describe());
    unit.dst = out;
    unit.members = n;
    unit.dtype = a.dtype;
    unit.op = a.reduce;
    unit.count = c;
  }
  for (const CollectivePiece& piece : a.pieces) {
    const CollectiveMessage& m = piece.message;
    const bool send = m.from == me;
    PostArgs one;
    one.type = send ? CommType::Send : CommType::Recv;
    one.dtype = a.dtype;
    one.count = m.count;
    one.peer = piece.peer_rank;
    one.protocol = m.protocol;
    one.path = a.path;
    one.remote = piece.peer;
    if (send)
      one.input = (m.from_output ? out : in) + m.from_offset * size;
    else
      one.output = out + m.to_offset * size;
    Step step = resolve(one);
    if (reduction && !send && m.protocol != Protocol::Put) {
      // The sender's chunk is a source: every source has this chunk's place.
      step.unit = static_cast<int>(w.units.size());
      step.source = m.from;
      unit.srcs[static_cast<std::size_t>(m.from)] = step.src;
      if (unit.first_step < 0) unit.first_step = static_cast<int>(w.steps.size());
      unit.dst = step.dst;
      unit.count = m.count;
      own_offset = m.from_offset;
    }
    w.steps.push_back(step);
    addLane(w.lanes, step.lane);
  }
  auto local = [&](std::size_t to, const char* from, std::size_t count) {
    char* dst = out + to * size;
    if (dst != from && count > 0) w.copies.push_back({dst, from, count * size});
  };
  switch (a.type) {
    case CommType::Allgather: local(me * c, in, c); break;
    case CommType::Broadcast:
      if (a.root == me) local(0, in, c);
      break;
    case CommType::Alltoall: local(me * c, in + me * c * size, c); break;
    case CommType::Allreduce:
    case CommType::ReduceScatter:
      unit.srcs[static_cast<std::size_t>(me)] = in + own_offset * size;
      w.units.push_back(unit);
      break;
    default:
      HIR_INTERNAL_ASSERT(false, "ipc: {}: {} is not run as messages", a.path, toString(a.type));
  }
}

MessageStep::Copy State::copyOf(const Step& s, MessageStep& m) const {
  MessageStep::Copy c;
  c.counter = s.counter;
  c.number = s.counter != nullptr ? s.offset : s.seq;
  c.advance = s.counter != nullptr ? s.advance : 0;
  c.wait_back = s.counter != nullptr ? s.wait_back : s.seq - s.wait_seq;
  c.wait = s.await;
  c.dst = s.dst;
  c.src = s.src;
  c.bytes = s.bytes;
  c.signal = s.signal;
  c.slotted = s.slots > 0;
  c.inline_flags = s.inline_flags;
  c.direct = s.direct;
  c.posted = s.posted;
  c.mark = s.mark;
  if (c.slotted) {
    m.slots = s.slots;
    m.stride = s.dst_stride + s.src_stride;  // one of them, the slot's size
  }
  return c;
}

}  // namespace hir::ipc
