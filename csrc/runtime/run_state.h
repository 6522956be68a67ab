// What the evaluator keeps per communication, group and stream between
// instructions and across runs (internal to runtime/). The interpreter
// (evaluator_exec.cc, evaluator_run.cc) changes it; the diagnostics
// (diagnostics.h) read it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <hostir/backend.h>
#include <hostir/device.h>

#include "common/check.h"
#include "plan/plan.h"

namespace hir {

enum class PostState : uint8_t { Never, Posted, Skipped };

// The done events of posts. A post takes a free one; it stays referenced by
// its communication (while it is the latest post), its group and the flight
// recorder's entries of it, and goes back to the pool once none of them
// refers to it: an event is never re-recorded while anything may still ask
// about the post it was recorded for, so each flight recorder entry can ask
// whether its own post completed, without a record more per post. Sized at
// load for the worst case (every communication, group and entry holding a
// distinct event, and one being taken), so taking one never allocates.
class EventPool {
 public:
  void init(Device& dev, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      events_.push_back(dev.createEvent());
      free_.push_back(static_cast<int>(i));
    }
    refs_.assign(n, 0);
  }
  // A free event, with one reference.
  int take() {
    HIR_INTERNAL_ASSERT(!free_.empty(), "the event pool of {} events ran dry", events_.size());
    const int i = free_.back();
    free_.pop_back();
    refs_[i] = 1;
    return i;
  }
  void ref(int i) { ++refs_[i]; }
  void unref(int i) {
    if (i >= 0 && --refs_[i] == 0) free_.push_back(i);  // capacity reserved: no allocation
  }
  Event& operator[](int i) { return *events_[i]; }

 private:
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<uint32_t> refs_;
  std::vector<int> free_;
};

struct CommState {
  // The latest post's done event (its own, or its group's) and its index in
  // the EventPool; null (-1) when the post joined a stream (joined_on): that
  // stream's order is then its only completion signal.
  Event* last_done = nullptr;
  int last_event = -1;
  PostState state = PostState::Never;
  bool pending = false;         // posted and not waited yet (for reports)
  bool posted_this_run = false;
  int joined_on = -1;           // stream whose order already includes the post (postJoined)
  // The loop indices of the latest post, one per loop around the node
  // (sized once at load).
  std::vector<int64_t> loop_values;
};

struct GroupState {
  Event* done = nullptr;  // the latest post's (EventPool index `event`)
  int event = -1;
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

using Streams = std::array<StreamState, kMaxStreams>;

}  // namespace hir
