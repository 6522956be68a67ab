// A timeline of a rank's runs (internal to runtime/): EvaluatorOptions::trace
// makes the evaluator call a Tracer around its instructions, and
// Evaluator::traceEvents() returns what it recorded as Chrome trace events
// (the JSON that Perfetto and chrome://tracing open). writeTrace() gathers
// every rank's events into one file. docs/performance.md ("Timeline") says
// how to read it.
//
// - Host spans: the host time the evaluator spent on each instruction, on
//   track "host", named "<op> <node path> (<detail>)", with the loop indices
//   as args.
// - GPU spans: compute (fill, copy, check, matmul, add, kernel) and joined
//   posts on the track of the program stream they ran on ("stream k");
//   posts off the current stream on their backend's track ("nccl", "mpi",
//   "ipc", with a second lane "nccl #2" ... where spans overlap). Each is
//   timed by timing events (DeviceFeature::Timing) recorded on the stream
//   the work runs on; the host never waits for them while a run goes on.
// - Waits: a stream-mode wait is a span on its stream's track (how long the
//   stream stalled on it); a host-mode wait is its host span. An arrow
//   (flow) goes from the latest post of the communication (or group) to
//   each wait on it.
//
// The first startRun() waits once for a base event on the run's stream, to
// place GPU times on the host's clock; after that nothing blocks. Spans are
// capped per rank (max_spans); what was dropped is said in the trace.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/device.h>

#include "plan/plan.h"

namespace hir {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kDefaultMaxSpans = 200000;

  // UsageError when `dev` has no timing events. `timeout` bounds the host
  // waits: the base event's, and events()' wait for the tracer's streams.
  Tracer(Device& dev, const Plan& plan, int rank, Duration timeout,
         std::size_t max_spans = kDefaultMaxSpans);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // At the start of every run, before any of its work is enqueued on s0.
  // The first call records the base event on s0 and waits for it; later
  // calls only count the run.
  void startRun(Stream& s0);

  // The host span of instruction `pc`; `scalars` give its loop indices
  // (a for loop's own index is not among its node's loop slots, so the
  // values after the step are the ones it ran with). A host-mode wait gets
  // an arrow from the latest post of what it waits on.
  void host(int pc, Clock::time_point begin, Clock::time_point end, const int64_t* scalars);

  // Does instruction `pc` get a span on its stream: compute (fill, copy,
  // check, matmul, add, kernel), or a stream-mode wait (the span is how
  // long the stream stalled on it)?
  bool onStream(int pc) const { return on_stream_[pc] != 0; }

  // Instruction `pc` on program stream `k` (`s`), when onStream(pc): call
  // right before it enqueues its work (or its wait) and right after. A wait
  // also gets an arrow from the latest post of what it waits on. -1: no
  // span (over the cap, or a wait on nothing this rank posted).
  int gpuBegin(int pc, int k, Stream& s);
  void gpuEnd(int span, Stream& s);

  // A post (Post or GroupEnd at `pc`) from program stream `k`
  // (`current`): postBegin right before it, postEnd after it with its
  // completion event, or null when the backend ran it on `current`
  // (postJoined): then the span ends on `current`, on that stream's track;
  // else a stream of the tracer waits for `done` and records the end there,
  // and the span is on the backend's track.
  int postBegin(int pc, int k, Stream& current);
  void postEnd(int span, Event* done);

  // This rank's events, comma-separated JSON objects without the brackets.
  // Call after Evaluator::synchronize(); spans whose work has not completed
  // are left out (and counted in the trace).
  std::string events();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<uint8_t> on_stream_;  // per pc
};

// Collective: gathers every rank's events through the bootstrap and, on
// rank 0, writes {"traceEvents": [...], "displayTimeUnit": "ns"} to `path`.
// Every rank throws the same error when rank 0 cannot open the file
// (UsageError) or write it (RuntimeError).
void writeTrace(Bootstrap& boot, const std::string& events, const std::string& path);

}  // namespace hir
