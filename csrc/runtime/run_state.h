// What the evaluator keeps per communication, group and stream between
// instructions and across runs (internal to runtime/). The interpreter
// (evaluator.cc) changes it; the diagnostics (diagnostics.h) read it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <hostir/backend.h>
#include <hostir/device.h>

#include "plan/plan.h"

namespace hir {

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
  // The loop indices of the latest post, one per loop around the node
  // (sized once at load).
  std::vector<int64_t> loop_values;
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

using Streams = std::array<StreamState, kMaxStreams>;

}  // namespace hir
