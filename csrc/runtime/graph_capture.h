// Graph mode's state (internal to runtime/; EvaluatorOptions::graph): when
// a run is captured, the capture's begin and end around it, the replays,
// and dropping the graph when a binding changes. The evaluator keeps the
// run itself; what the capture needs of its state (the host synchronized,
// the events it holds forgotten) it passes in as Hooks. docs/architecture.md,
// "Graphs".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <hostir/backend.h>
#include <hostir/device.h>
#include <hostir/evaluator.h>

#include "runtime/diagnostics.h"

namespace hir {

class GraphCapture {
 public:
  struct Hooks {
    // Blocks until everything enqueued so far completed (with the timeout).
    std::function<void()> synchronize_all;
    // Drops every record of events recorded so far (communications',
    // groups', the blocks' users): nothing may wait on them again.
    std::function<void()> forget_events;
    // After the capture: the flight recorder's entries were captured.
    std::function<void()> mark_flight;
  };

  GraphCapture(bool enabled, Device& dev, std::vector<std::unique_ptr<Backend>>& backends,
               Diagnostics& diag, Hooks hooks);

  // A graph is ready: run `run` is a replay.
  bool replaying() const { return graph_ != nullptr; }
  // Run `run` (1-based) is to be captured: the second, or the first after a
  // binding dropped the graph.
  bool captures(uint64_t run) const { return enabled_ && !graph_ && (run == 2 || recapture_); }
  bool capturing() const { return capturing_; }

  // Around the captured run on `s0` (the caller's stream): begin() after
  // the host synchronized and forgot the earlier events; end() once the run
  // joined every stream it forked to s0, then launches the graph for it.
  void begin(Stream& s0, uint64_t run);
  void end(Stream& s0, uint64_t run);
  // A failure inside the captured run: ends the capture (the graph is
  // dropped) so that the stream leaves capture mode. Never throws.
  void abandon(Stream& s0) noexcept;
  // A run of a captured program: one launch; the checks count the
  // executions it repeats.
  void replay(Stream& s0);
  // A bind() changed an address: the graph holds the old one, so it is
  // dropped and the next run is captured again.
  void rebound(uint64_t run);
  // Destroys the graph (before the backends: NCCL's communicator teardown
  // waits for graphs that hold its operations).
  void release() { graph_.reset(); }

  GraphStats stats() const { return stats_; }

 private:
  void launch(Stream& s0);

  bool enabled_;
  Device& dev_;
  std::vector<std::unique_ptr<Backend>>& backends_;
  Diagnostics& diag_;
  Hooks hooks_;
  std::unique_ptr<Graph> graph_;
  bool capturing_ = false;
  bool recapture_ = false;
  GraphStats stats_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hir
