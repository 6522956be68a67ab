// What the evaluator says about a run (internal to runtime/): where an
// instruction is (node path, rank, loop indices), what is still pending when
// a run times out, the flight recorder's last communications, and the
// results of the check nodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hostir/device.h>
#include <hostir/evaluator.h>

#include "plan/plan.h"
#include "runtime/flight_recorder.h"
#include "runtime/run_state.h"

namespace hir {

class Diagnostics {
 public:
  Diagnostics(const Plan& plan, Device& dev, int rank);
  ~Diagnostics();
  Diagnostics(const Diagnostics&) = delete;
  Diagnostics& operator=(const Diagnostics&) = delete;

  // "i=2, j=0": the loop indices around `node`, from `values` (one per loop
  // slot of the node, or the first `count` of them), or empty outside loops.
  std::string loopContext(int node, const int64_t* values, int count = -1) const;
  // "PATH: on rank R (i=2)", with the loop indices now in `scalars`.
  std::string where(int node, const int64_t* scalars) const;
  // The loop indices around `node` now, into `out` (one per loop slot).
  void loopValues(int node, const int64_t* scalars, std::vector<int64_t>& out) const;

  // What this rank still waits for, with node paths and loop indices. A
  // joined post has no done event: it is listed while its stream has not
  // finished (`ask_streams`: record an event on the stream and query it;
  // without, it is listed as it is).
  std::string pendingReport(const std::vector<CommState>& comms, Streams& streams,
                            bool ask_streams = true) const;
  // The flight recorder's entries, oldest first, one line each: post number,
  // state, name, type, peer or team with the operation's number there, node
  // path, loop indices, backend, run, stream. The state: "done" or
  // "PENDING" by the post's own done event; a joined post (no event):
  // "done" once its stream finished, else "queued"; "unknown" when the
  // device failed (it cannot be asked) or, without `ask_streams`, for a
  // joined post. Asks the device; never throws.
  std::string flightReport(const FlightRecorder& recorder, EventPool& events, Streams& streams,
                           bool ask_streams = true) const;

  // After a failure: the check records may still be written by stuck work;
  // they are left to the process instead of freed.
  void leak() { leak_ = true; }

  // Check nodes. beginCheck() starts a new execution of check `check`
  // with the loop indices in `scalars` and returns its execution number;
  // record(check) is then the record that execution writes to. The first
  // kRecordedExecutions executions of each check node get a record of
  // their own, so that the report counts wrong elements per execution and
  // failing executions exactly; later ones share one record per node.
  static constexpr int64_t kRecordedExecutions = 1024;
  int64_t beginCheck(int check, const int64_t* scalars);
  CheckRecord* record(int check) const { return current_[check]; }
  RunReport report() const;
  // Graph capture. While capturing, every check execution writes its node's
  // shared record: the graph replays those writes, so the captured
  // executions and all their replays count together, as executions past
  // kRecordedExecutions do. replayed() counts one more replay of them: of
  // the latest capture's executions (a capture after a bind() replaces the
  // graph, and its replays repeat only its own).
  void setCapturing(bool on);
  void replayed();

 private:
  const Plan& plan_;
  Device& dev_;
  int rank_;
  CheckRecord* shared_ = nullptr;  // per check: its executions past kRecordedExecutions
  std::vector<CheckRecord*> blocks_;  // every block of records allocated, freed at the end
  struct Spare {
    CheckRecord* next = nullptr;
    int64_t left = 0;
  };
  std::vector<Spare> spare_;                        // per check: the rest of its latest block
  std::vector<std::vector<CheckRecord*>> executed_;  // per check: the record of each execution
  std::vector<CheckRecord*> current_;                // per check: its latest execution's
  bool leak_ = false;
  std::vector<int64_t> check_executions_;
  bool capturing_ = false;
  std::vector<int64_t> captured_executions_;   // per check: executions in the capture
  std::vector<std::vector<int64_t>> check_contexts_;  // per check: flat loop values
};

}  // namespace hir
