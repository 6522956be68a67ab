// What `hir run` and `hir sweep` measure and say: the timed loop, every
// rank's figures gathered, the human line, the JSON result
// (format hostir-result/1) and the progress line. docs/cli.md describes
// each number ("The result line", "Results as JSON", "Progress").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>

#include "plan/plan.h"
#include "tools/comm_volume.h"

namespace hir {

// "812 ns", "48.2 us", "1.23 ms", "2.50 s": three significant digits in the
// unit that fits.
std::string formatDuration(double seconds);
// "8 B", "4 KiB", "1.5 MiB", "1 GiB".
std::string formatBytes(int64_t bytes);

// A progress line on standard error for long runs (rank 0 only; the caller
// decides): nothing for the first 3 s; then on a terminal one line updated
// in place twice a second, otherwise one line every 10 s. A thread of its
// own writes it; the destructor stops it and clears the line.
class Progress {
 public:
  explicit Progress(bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A new stage of `runs` runs, the first `warmup` of them untimed; `label`
  // goes before "run N of M" ("size 64 MiB (5 of 28), ").
  void stage(std::string label, int64_t warmup, int64_t runs);
  // One more run enqueued.
  void ran() { done_.fetch_add(1, std::memory_order_relaxed); }
  // Takes the line off the terminal before the caller prints (it comes
  // back at the next update).
  void clear();

 private:
  void loop();
  std::string line(double elapsed);

  bool enabled_;
  bool tty_ = false;
  std::atomic<int64_t> done_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool shown_ = false;  // a line is on the terminal
  std::string label_;
  int64_t warmup_ = 0, runs_ = 0;
  double stage_start_ = 0;  // seconds since the start; -1: the next update takes it
  std::thread thread_;
};

// The timed loop: `warmup` runs, synchronize, a barrier (every rank starts
// the timed runs together), `iters` runs, synchronize. Returns this rank's
// mean time per timed run in seconds.
double timeRuns(Evaluator& ev, Bootstrap& boot, int warmup, int iters, Progress& progress);

// One rank's figures.
struct RankFigures {
  double seconds_per_run = 0;  // its mean over the timed runs
  uint64_t checks_run = 0, checks_failed = 0, elements_checked = 0, wrong_elements = 0;
  // Over the rank's check nodes: the most wrong elements one execution of
  // a node had, summed over the nodes.
  uint64_t wrong_per_execution = 0;
};

// Every rank's figures (index = rank), and their spread.
struct RunFigures {
  std::vector<RankFigures> ranks;
  double mean = 0, min = 0, median = 0, max = 0;  // of seconds_per_run across ranks
  RankFigures total;  // checks summed over the ranks (seconds_per_run: mean)
  int failed_ranks = 0;
};

// Collective: gathers every rank's figures onto every rank.
RunFigures gatherFigures(Bootstrap& boot, double seconds_per_run, const RunReport& report);
// Collective: every rank's `text`, index = rank, on every rank.
std::vector<std::string> gatherText(Bootstrap& boot, const std::string& text);

// What is said of every run besides the figures.
struct RunDescription {
  std::string program;
  int world = 1;
  std::string device;       // Device::describe() of rank 0
  std::string device_kind;  // "host", "cuda"
  int iters = 1, warmup = 0;
  std::vector<std::pair<std::string, int64_t>> params;  // the program's, after --param
  uint64_t check_nodes = 0;
  // --graph: rank 0's capture (run 2) and launches; null without --graph.
  std::optional<GraphStats> graph;
  // Allocations placed in symmetric memory (Evaluator::symmetricAllocations).
  std::vector<std::string> symmetric;
};

// rank 0's line on standard output: "hir: ok: ..." or "hir: FAILED: ...".
std::string resultLine(const RunDescription& d, const RunFigures& f, const ProgramVolume& v);

// This rank's check failures as a JSON array (for gatherText).
std::string failuresJson(const RunReport& report);
// The hostir-result/1 document; `failures` is every rank's failuresJson.
std::string resultJson(const RunDescription& d, const Plan& plan, const RunFigures& f,
                       const ProgramVolume& v, const std::vector<std::string>& failures,
                       int exit_code);

}  // namespace hir
