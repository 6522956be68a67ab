#include "runtime/flight_recorder.h"

#include <algorithm>

namespace hir {

FlightRecorder::FlightRecorder(const Plan& plan)
    : plan_(plan),
      team_collectives_(plan.teams.size(), 0),
      sends_to_(static_cast<std::size_t>(plan.world), 0),
      recvs_from_(static_cast<std::size_t>(plan.world), 0) {}

int FlightRecorder::record(int slot, const PostArgs& p, const Post& post) {
  // Every field written in place (the hot path: no reset of the entry).
  const uint64_t seq = seq_.load(std::memory_order_relaxed) + 1;
  Entry& e = ring_[(seq - 1) % kEntries];
  const int released = e.event;
  e.seq = seq;
  const PlanComm& c = plan_.comms[slot];
  e.run = post.run;
  e.comm = slot;
  e.stream = post.stream;
  e.joined = post.joined;
  e.event = post.event;
  e.captured = false;
  e.peer = -1;
  e.root = -1;
  if (isPointToPoint(c.type)) {
    e.peer = p.peer;
    e.match = ++(c.type == CommType::Send ? sends_to_ : recvs_from_)[static_cast<std::size_t>(p.peer)];
  } else {
    e.match = ++team_collectives_[static_cast<std::size_t>(c.team)];
    if (hasRoot(c.type)) e.root = p.root;
  }
  const std::vector<int64_t>& loops = *post.loops;
  e.loops = static_cast<int>(std::min<std::size_t>(loops.size(), kMaxLoops));
  e.more_loops = loops.size() > static_cast<std::size_t>(kMaxLoops);
  std::copy_n(loops.begin(), e.loops, e.loop_values.begin());
  seq_.store(seq, std::memory_order_release);  // publishes the entry (posts())
  return released;
}

}  // namespace hir
