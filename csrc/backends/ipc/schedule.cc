// Where and in what order a post's steps run (state.h): on the lanes'
// streams (enqueue, enqueueDetached), or on one stream in phases
// (enqueuePhased), in waves when a lane has more eager sends than slots
// (enqueueOnStream), with device message steps and reductions where the
// device can do several parts at once.
#include <algorithm>
#include <cstring>

#include "common/buffer_ranges.h"
#include "backends/ipc/state.h"
#include "common/log.h"

namespace hir::ipc {

void State::waitFor(Stream& on, const Step& s, uint32_t advance) {
  if (s.counter == nullptr) return dev->waitValue(on, s.await, s.wait_seq);
  msg->countedStep(on, CountedStep{.counter = s.counter,
                                   .offset = s.offset,
                                   .advance = advance,
                                   .wait_addr = s.await,
                                   .release = releaseWord(),
                                   .wait_back = s.wait_back});
}

void State::signalTo(Stream& on, const Step& s, uint32_t advance) {
  if (s.counter == nullptr) return dev->writeValue(on, s.signal, s.seq);
  msg->countedStep(on, CountedStep{.counter = s.counter,
                                   .offset = s.offset,
                                   .advance = advance,
                                   .signal_addr = s.signal});
}

void State::announce(Stream& on, const Step& s) {
  if (!s.copies) signalTo(on, s, 0);
}

// The side that copies: a message step of one part (a push when it writes
// into the peer's memory or its slot, a pull when it reads out of its own
// slot), which the device runs as one signaled copy or counted step.
void State::transfer(Stream& on, const Step& s) {
  if (!s.copies) return;
  MessageStep m;
  m.release = stepRelease();
  if (s.eager && !s.early)  // an eager receive: out of its own slot
    m.pulls[m.pull_count++] = copyOf(s, m);
  else
    m.pushes[m.push_count++] = copyOf(s, m);
  msg->messageStep(on, m);
}

void State::await(Stream& on, const Step& s) {
  if (!s.copies) waitFor(on, s, s.advance);
}

// One device step: the senders' "ready" (eager: "done"), the reduction,
// then "consumed" ("free") and, in counted mode, the lanes' advance; counted
// eager sources are found on the device, in the slot of their number. With
// `push_sends`, the post's eager sends come first in the same step.
void State::reduce(Stream& on, Work& w, int u, bool push_sends) {
  MessageStep sync;
  sync.release = stepRelease();
  for (const Step& s : w.steps)
    if (push_sends && s.early) sync.pushes[sync.push_count++] = copyOf(s, sync);
  for (const Step& s : w.steps) {
    if (s.unit != u) continue;
    HIR_INTERNAL_ASSERT(s.wait_back == 0 && s.wait_seq == s.seq,
                        "ipc: a reduction source waits for {} and signals {}", s.wait_seq, s.seq);
    const auto j = static_cast<std::size_t>(s.source);
    const MessageStep::Copy c = copyOf(s, sync);  // its copy is the reduction's read
    sync.counters[j] = c.counter;
    sync.numbers[j] = c.number;
    sync.advances[j] = c.advance;
    sync.waits[j] = c.wait;
    sync.signals[j] = c.signal;
    sync.slotted[j] = c.slotted;
    sync.inline_flags[j] = c.inline_flags;
  }
  const ReduceUnit& r = w.units[static_cast<std::size_t>(u)];
  msg->reduce(on, r.dst, r.srcs.data(), static_cast<std::size_t>(r.members), r.dtype, r.op,
              r.count, sync);
}

void State::messageSteps(Stream& on, const Work& w) {
  MessageStep m;
  m.release = stepRelease();
  auto flushIfFull = [&](std::size_t n) {
    if (n < m.pushes.size()) return;
    msg->messageStep(on, m);
    m.push_count = m.pull_count = 0;
  };
  // Every push before any pull (a later step's pushes come first in it).
  for (const Step& s : w.steps)
    if (s.early) {
      flushIfFull(m.push_count);
      m.pushes[m.push_count++] = copyOf(s, m);
    }
  for (const LocalCopy& c : w.copies) {
    flushIfFull(m.pull_count);
    MessageStep::Copy& local = m.pulls[m.pull_count++];
    local = MessageStep::Copy{};
    local.dst = c.dst;
    local.src = c.src;
    local.bytes = c.bytes;
  }
  for (const Step& s : w.steps)
    if (!s.early) {
      flushIfFull(m.pull_count);
      MessageStep::Copy& pull = m.pulls[m.pull_count++];
      pull = copyOf(s, m);
      // A pull posts for direct delivery only as its lane's one pull here
      // (messages.h).
      if (std::count_if(w.steps.begin(), w.steps.end(), [&](const Step& o) {
            return !o.early && o.lane == s.lane;
          }) > 1)
        pull.posted = nullptr;
    }
  if (m.push_count + m.pull_count > 0) msg->messageStep(on, m);
}

// On the lane's stream, after the poster's `ready` event and the lane's
// last joined message (when that ran on another stream than `current`,
// whose `ready` covers it).
void State::follow(Lane& l, Stream& on, const Stream* covered) {
  if (l.on == nullptr || l.on == &on || l.on == covered) return;
  if (l.on == l.stream.get()) dev->record(*l.tail, *l.stream);
  dev->wait(on, *l.tail);
}

void State::enqueue(const Step& s, Stream& current) {
  Lane& l = *s.lane;
  Stream& on = *l.stream;
  dev->wait(on, *ready);
  follow(l, on, &current);
  l.on = &on;
  announce(on, s);
  transfer(on, s);
  await(on, s);
}

// Each step on its lane's stream after `current`; a group's `done` on a
// stream of its own, so that no later message queues behind the group's
// other messages.
void State::enqueueDetached(Work& w, Stream& current, Event& done) {
  dev->record(*ready, current);
  w.lanes.clear();
  for (const Step& s : w.steps) {
    enqueue(s, current);
    addLane(w.lanes, s.lane);
  }
  for (Lane* l : w.lanes) {
    dev->record(*joined, *l->stream);
    dev->wait(*join, *joined);
  }
  dev->record(done, *join);
}

namespace {

// Counted mode, for the phases of enqueuePhased(): the k-th message of a
// lane in `steps` is number *counter + k, and the lane's last part enqueued
// (its last wait if it has a side that does not copy, else its last copy
// or reduction source, which the middle phase enqueues in step order)
// advances the counter past them all.
void countInGroup(std::vector<Step>& steps,
                  std::vector<std::pair<uint32_t*, uint32_t>>& n) {  // counter -> messages so far
  n.clear();
  for (Step& s : steps) {
    auto it = std::find_if(n.begin(), n.end(), [&](const auto& e) { return e.first == s.counter; });
    if (it == n.end()) it = n.insert(n.end(), {s.counter, 0});
    s.offset = ++it->second;
    s.advance = 0;
  }
  for (auto& [counter, total] : n) {
    Step* last = nullptr;
    for (Step& s : steps)
      if (s.counter == counter && (last == nullptr || !s.copies || last->copies)) last = &s;
    last->advance = total;
  }
}

}  // namespace

// First the signals of the sides that do not copy, then the local copies
// (from kAsideCopyMin bytes on a stream beside `on`, joined after the last
// waits); then, in step order, the copies (each after its peer's signal;
// consecutive puts and gets as one message step) and the reductions (each
// where its first source comes, after its sources' signals); then the
// remaining waits. A reduction or a copy waits only for
// signals that its peers' posts give before any of their own waits, so a
// group whose messages form a ring, or a collective, cannot deadlock. Step
// order keeps each lane's signals in the order of its message numbers (a
// counter must never go back), and a collective's reduction before the
// copies of what it reduced (its get messages come before its put
// messages).
void State::enqueuePhased(Work& w, Stream& on, const Stream* covered) {
  if (counted) countInGroup(w.steps, w.per_counter);
  for (Lane* l : w.lanes) follow(*l, on, covered);
  const bool one_step = oneStep(w), only_eager = !one_step && onlyEager(w);
  if (one_step) reduce(on, w, 0, true);
  if (only_eager) messageSteps(on, w);
  if (one_step || only_eager) {
    for (Lane* l : w.lanes) {
      dev->record(*l->tail, on);
      l->on = &on;
    }
    return;
  }
  // The peers wait for these signals, then for the eager sends (which wait
  // only for earlier posts' messages, see eagerLoad()). Every signal goes
  // first: an eager send may wait for its slot, which the peer frees only
  // once its own post got past a put that waits for one of our signals.
  // The local copies touch only the member's own chunk, which no peer
  // reads or writes.
  for (const Step& s : w.steps)
    if (!s.early) announce(on, s);
  for (const Step& s : w.steps)
    if (s.early) transfer(on, s);
  std::size_t local_bytes = 0;
  for (const LocalCopy& c : w.copies) local_bytes += c.bytes;
  Aside* aside = nullptr;
  if (local_bytes >= kAsideCopyMin) {
    aside = &asides[&on];
    if (!aside->stream) {
      aside->stream = dev->createStream();
      aside->forked = dev->createEvent();
      aside->done = dev->createEvent();
    }
    dev->record(*aside->forked, on);
    dev->wait(*aside->stream, *aside->forked);
  }
  for (const LocalCopy& c : w.copies)
    dev->copy(aside != nullptr ? *aside->stream : on, c.dst, c.src, c.bytes);
  if (aside != nullptr) dev->record(*aside->done, *aside->stream);
  for (std::size_t u = 0; u < w.units.size(); ++u)
    if (w.units[u].first_step < 0) reduce(on, w, static_cast<int>(u));  // a team of one
  // This side's consecutive puts and gets are one message step of pushes,
  // which a device may move at once (cuda: one grid, each push on its own
  // link): each waits only for its peer's first signals, never for this
  // post's work. A transfer that reads or writes what an earlier one of the
  // step writes (a scatter-allgather broadcast forwards what its get
  // brought) starts the next step, behind it.
  MessageStep pushes;
  pushes.release = stepRelease();
  auto flush = [&] {
    if (pushes.push_count > 0) msg->messageStep(on, pushes);
    pushes.push_count = 0;
  };
  auto follows = [&](const Step& s) {
    for (std::size_t i = 0; i < pushes.push_count; ++i) {
      const MessageStep::Copy& c = pushes.pushes[i];
      if (overlaps(s.src, s.bytes, c.dst, c.bytes) || overlaps(s.dst, s.bytes, c.dst, c.bytes) ||
          overlaps(s.dst, s.bytes, c.src, c.bytes))
        return true;
    }
    return false;
  };
  for (std::size_t k = 0; k < w.steps.size(); ++k) {
    const Step& s = w.steps[k];
    if (s.early || (s.unit < 0 && !s.copies)) continue;
    if (s.unit < 0 && !s.eager && push_steps) {
      if (pushes.push_count == pushes.pushes.size() || follows(s)) flush();
      pushes.pushes[pushes.push_count++] = copyOf(s, pushes);
      continue;
    }
    flush();
    if (s.unit < 0)
      transfer(on, s);
    else if (w.units[static_cast<std::size_t>(s.unit)].first_step == static_cast<int>(k))
      reduce(on, w, s.unit);
  }
  flush();
  for (const Step& s : w.steps) await(on, s);
  if (aside != nullptr) dev->wait(on, *aside->done);
  for (Lane* l : w.lanes) {
    dev->record(*l->tail, on);
    l->on = &on;
  }
}

uint32_t State::eagerLoad(std::span<const PostArgs> ops) {
  std::fill(wave_load.begin(), wave_load.end(), 0);
  uint32_t most = 0;
  for (const PostArgs& a : ops)
    forEachEagerSend(a, [&](int peer) {
      most = std::max(most, ++wave_load[static_cast<std::size_t>(peer)]);
    });
  return most;
}

void State::enqueueOnStream(std::span<const PostArgs> ops, Stream& on,
                                           const Stream* covered) {
  Work& w = work;
  w.clear();
  if (eagerLoad(ops) <= eager_slots) {
    for (const PostArgs& a : ops) add(a, w);
    return enqueuePhased(w, on, covered);
  }
  const auto collective = std::find_if(ops.begin(), ops.end(),
                                       [](const PostArgs& a) { return !isPointToPoint(a.type); });
  for (const PostArgs& a : ops)
    if (isPointToPoint(a.type))
      throw ProgramError(fmt::format(
          "ipc: {}: a group with a collective and more eager messages to one peer than its {} "
          "slots (HIR_IPC_EAGER_SLOTS, or fewer when the program's largest eager send makes "
          "them large: HIR_IPC_EAGER_SEND_MAX), and a {} ({}) that a wave of the group could "
          "leave waiting; give the sends and recvs protocol 'put', or post the collective apart",
          collective->path, eager_slots, toString(a.type), a.path));
  // Every member cuts its group at the same ops: a collective's eager
  // sends are the same on every member (one per peer).
  std::fill(wave_load.begin(), wave_load.end(), 0);
  for (const PostArgs& a : ops) {
    bool fits = true;
    forEachEagerSend(a, [&](int peer) {
      if (wave_load[static_cast<std::size_t>(peer)] + 1 > eager_slots) fits = false;
    });
    if (!fits) {
      enqueuePhased(w, on, covered);
      w.clear();
      covered = nullptr;  // the lanes' last messages ran on `on`
      std::fill(wave_load.begin(), wave_load.end(), 0);
    }
    forEachEagerSend(a, [&](int peer) { ++wave_load[static_cast<std::size_t>(peer)]; });
    add(a, w);
  }
  enqueuePhased(w, on, covered);
}

}  // namespace hir::ipc
