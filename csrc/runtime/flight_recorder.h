// The flight recorder (internal to runtime/): the last kEntries
// communications this rank posted, each with what identifies it on every
// rank — node, loop indices, peer or team, and its number among the
// messages of its pair or the collectives of its team — in a fixed ring, so
// that a post writes one entry and allocates nothing. Each entry keeps the
// done event of its own post (EventPool in run_state.h); whether it
// completed is asked only when a report is made (Diagnostics::flightReport),
// so the hot path adds no device call. The report of a timeout or a failure
// prints it next to the pending communications.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include <hostir/backend.h>

#include "plan/plan.h"

namespace hir {

class FlightRecorder {
 public:
  static constexpr int kEntries = 16;
  static constexpr int kMaxLoops = 6;  // loop indices kept per entry (outermost first)

  struct Entry {
    uint64_t seq = 0;    // this rank's post number, 1-based over the evaluator's life; 0: empty
    uint64_t run = 0;    // the run it was posted in, 1-based
    // Its number among this rank's sends to its peer, receives from its
    // peer, or collectives of its team: the matching operation on the peer
    // (or on every member) has the same number.
    uint64_t match = 0;
    int comm = -1;       // communication slot
    int peer = -1;       // world rank (send, recv), or -1
    int root = -1;       // team rank of the root (rooted collectives), or -1
    int stream = -1;     // the current stream of the post
    int joined = -1;     // the stream whose order holds it (a joined post), or -1
    int event = -1;      // its done event in the EventPool, or -1 (joined)
    int loops = 0;       // loop indices stored in loop_values
    bool more_loops = false;  // the node has more than kMaxLoops loops around it
    bool captured = false;    // posted while a graph was captured: every replay repeats it
    std::array<int64_t, kMaxLoops> loop_values{};
  };

  // Sizes the counters of operations per team and per peer (at load).
  explicit FlightRecorder(const Plan& plan);

  // What a post is, besides its arguments: the loop indices of its node,
  // the run, the current stream, and where its completion shows.
  struct Post {
    const std::vector<int64_t>* loops = nullptr;
    uint64_t run = 0;
    int stream = 0;
    int joined = -1;  // the stream whose order holds it, or -1
    int event = -1;   // its done event (EventPool), or -1
  };
  // Records a post of communication `slot` with arguments `p` in place of
  // the oldest entry; returns the event that entry held (-1: none), which
  // the caller gives back, the caller having taken a reference for this
  // one's.
  int record(int slot, const PostArgs& p, const Post& post);

  // After a graph capture: the entries' events were recorded inside the
  // capture, where nobody may ask them. Each entry gives its event back
  // through `give_back(event)` and is marked captured.
  template <class F>
  void markCaptured(F&& give_back) {
    for (Entry& e : ring_) {
      if (e.seq == 0) continue;
      give_back(e.event);
      e.event = -1;
      e.joined = -1;
      e.captured = true;
    }
  }
  // The reports may be made on the watchdog's thread while the host thread
  // is blocked in a post (Watchdog): the count is published with release
  // after its entry is written, and read with acquire, so that the entries
  // read are the ones written. (A host that still posts while a report is
  // made can overwrite the oldest entries; the report is then of a host that
  // was not stuck after all, and says so by its counts.)
  uint64_t posts() const { return seq_.load(std::memory_order_acquire); }

  // Every entry, oldest first.
  template <class F>
  void forEach(F&& f) const {
    const uint64_t last = posts();
    const uint64_t first = last > kEntries ? last - kEntries + 1 : 1;
    for (uint64_t s = first; s <= last; ++s) f(ring_[(s - 1) % kEntries]);
  }

 private:
  const Plan& plan_;
  std::array<Entry, kEntries> ring_{};
  std::atomic<uint64_t> seq_{0};  // written by the host thread only
  // This rank's collectives per team, sends per peer, receives per peer.
  std::vector<uint64_t> team_collectives_, sends_to_, recvs_from_;
};

}  // namespace hir
