// The Evaluator: runs a program on one rank, enqueuing its work on streams.
//
//   hir::Session session(*hir::createMpiBootstrap());
//   hir::Evaluator ev(session, program);      // validate, check, lower, set up
//   ev.bind("x", my_device_ptr, bytes);        // optional, inputs/outputs
//   ev.run(my_stream);                         // enqueue; no host sync
//   ev.synchronize();                          // only if the host needs it
//   hir::RunReport r = ev.report();            // check results
//
// run() enqueues the whole program and returns without blocking the host
// (unless the program has a host-mode wait): work goes on the device's
// streams, communications on the backends' streams, and every dependency is a
// recorded event. When run() returns, the caller's stream (or stream 0) waits
// for everything the run enqueued.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/program.h>

namespace hir {

class Session;
struct Plan;

struct EvaluatorOptions {
  // Every host wait; and the longest the host may go without progress
  // inside run(), synchronize() or setup (a watchdog thread: timeout + 1 s,
  // then the run fails; if still stuck 1.5 s later, the job is ended
  // through Bootstrap::abort). See "Failure" below. Positive: 0 or less is
  // a UsageError at construction.
  std::chrono::milliseconds timeout{300000};
  bool check_schedule = true;                 // run the cross-rank check at load
  // The cross-rank check walks at most this many steps of each rank's run
  // (and 16,000,000 over all ranks): a longer run is checked in part (its
  // first steps), which graph mode refuses and ipc's eager slots allow for.
  // At least 1; every rank must give the same.
  int64_t check_steps_per_rank = 4'000'000;
  // Records a timeline of every run (host time per instruction, GPU spans
  // timed by events on their streams); see Evaluator::traceEvents(). Needs a
  // device with timing events.
  bool trace = false;
  // Capture a run into a graph once and replay it (CUDA graphs): run 1 runs
  // as usual (allocations, exchanges and the libraries' connections are
  // made there), run 2 is captured and then launched, and every later run
  // is one launch of that graph, with no per-node host work. Needs a device
  // with graphs (cuda), backends whose posts are capturable (nccl), and a
  // program the cross-rank check proved capturable: it must check (no
  // check_schedule = false), cover whole runs, and find no host-mode wait
  // and no allocation that changes size within a run. Otherwise the
  // constructor throws, naming the node. Every rank must ask for it alike.
  // Not with trace. Check nodes keep working; their executions in the graph
  // are counted together (CheckFailure::replayed).
  bool graph = false;
  // Symmetric memory: an allocation that every rank allocates with the same
  // size (its shape uses only params and world), that is no input or output
  // and not peer-mapped, and that only collectives of one backend with
  // symmetric memory use, is placed in that backend's memory at load (nccl:
  // ncclMemAlloc and a symmetric window per team, NCCL >= 2.27, which
  // NCCL's symmetric kernels need). Auto: in graph mode only, where those
  // kernels make the fastest small collectives, while eagerly they are
  // slower (docs/performance.md). On: always; Off: never.
  // Evaluator::symmetricAllocations() lists what was placed.
  enum class Symmetric : uint8_t { Auto, On, Off };
  Symmetric symmetric_memory = Symmetric::Auto;
};

// What graph mode did (Evaluator::graphStats()).
struct GraphStats {
  bool captured = false;
  double capture_ms = 0;   // host time of the captured run: capture and instantiation
  uint64_t launches = 0;   // runs that launched the graph (the captured run included)
};

// A check node that found wrong elements on this rank. Counts are per
// execution of the node (one execution: the node run once, in one loop
// iteration of one run) and, in `mismatches`, over all of them. The first
// 1024 executions of each node are counted one by one, later ones only
// together: `exact` false means that some of those failed, and
// `failed_executions` and the per-execution counts then cover the first
// 1024 only (plus one for the rest).
struct CheckFailure {
  int rank = 0;
  std::string path;     // node path of the check
  std::string tensor;   // reference as written
  std::string context;  // loop indices of the first failing execution, "i=1, j=0"
  uint64_t mismatches = 0;         // wrong elements over every execution
  uint64_t executions = 0;         // executions of the node so far
  uint64_t failed_executions = 0;  // executions with a wrong element
  uint64_t wrong_min = 0, wrong_max = 0;        // wrong elements in one failing execution
  uint64_t elements_min = 0, elements_max = 0;  // elements in one execution
  bool exact = true;
  // Some of the failing executions were in a graph (EvaluatorOptions::graph):
  // the captured run and its replays are counted together.
  bool replayed = false;
  struct Element {
    int64_t index;
    double got, expected;  // floating dtypes; integers converted (rounded beyond 2^53)
    // Integer dtypes: the exact values.
    bool integer = false;
    int64_t got_int = 0, expected_int = 0;
  };
  std::vector<Element> first;  // the first few of that execution
};

struct RunReport {
  uint64_t checks_run = 0;      // check executions, all runs so far
  uint64_t checks_failed = 0;   // of those, with a wrong element (CheckFailure::exact aside)
  uint64_t elements_checked = 0;
  uint64_t wrong_elements = 0;  // over every execution
  std::vector<CheckFailure> failures;  // this rank's
  bool ok() const { return failures.empty(); }
  // One failure per line: "rank 1: check failed at /body/2: 'x' has 16
  // wrong elements of 16 in 3 of 3 executions (48 in all); [0] got 1
  // expected 2; ...".
  std::string format() const;
};

// Failure: the first error of run() or synchronize() (TimeoutError,
// BackendError, RuntimeError, ProgramError) fails the evaluator for good:
// the error carries this rank's pending communications and its flight
// recorder (the last 16 posts, each with its state); every backend is
// aborted (Backend::abort) and the device abandons its queued work
// (Device::cancel), so destroying the evaluator waits for nothing; later
// run() and synchronize() throw RuntimeError. docs/cli.md, "Timeouts and the
// flight recorder".
class Evaluator {
 public:
  Evaluator(Session& session, const Program& program, const EvaluatorOptions& options = {});
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Binds a caller-owned buffer to an input or output allocation. It must
  // hold at least the allocation's bytes when the Allocate node runs. In
  // graph mode a bind() after the capture drops the graph (it holds the old
  // addresses); the next run is captured again.
  void bind(std::string_view name, void* data, std::size_t bytes);

  // Enqueues one run on `stream` (cudaStream_t for cuda; nullptr: stream 0).
  void run(void* stream = nullptr);
  // Blocks until all work of the runs so far completed (with the timeout).
  void synchronize();
  // Check results so far; call after synchronize().
  RunReport report() const;

  const Plan& plan() const;
  // With EvaluatorOptions::graph: the capture and the launches so far.
  GraphStats graphStats() const;
  // The allocations placed in a backend's symmetric memory at load
  // (EvaluatorOptions::symmetric_memory), in plan order.
  const std::vector<std::string>& symmetricAllocations() const;
  // Exchanges by share_mem_handles (ipc) that went through the bootstrap so
  // far; one of memory already exchanged is skipped and not counted. For tests.
  int64_t exchanges() const;
  // With EvaluatorOptions::trace: this rank's timeline of the runs so far,
  // as Chrome trace events (comma-separated JSON objects, no brackets); call
  // after synchronize(). `hir run --trace` gathers every rank's into one
  // file. Empty without trace.
  std::string traceEvents() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hir
