// `hir sweep`: runs a program at a series of sizes in the manner of
// nccl-tests (one MPI job, one Evaluator per size) and prints a row per
// size: size, count, type, redop, root, time, algbw, busbw, #wrong
// (docs/cli.md, "sweep").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/program.h>
#include <hostir/session.h>

#include "compile/compile.h"
#include "tools/comm_volume.h"

namespace hir {

struct SweepOptions {
  std::string param;           // --param-size NAME
  int64_t min_bytes = 0;       // -b
  int64_t max_bytes = 0;       // -e (default: -b)
  int64_t factor = 2;          // -f
  std::string unit = "elements";  // --param-unit: elements or bytes
  int iters = 20, warmup = 5;  // -n, -w
  std::string json, csv;       // --json FILE, --csv FILE ("-": standard output)
  bool progress = true;
  bool graph = false;          // --graph: every size's program must be capturable
};

// "8", "64K", "1M", "2G" (K = 1024 bytes, k as well): bytes. Throws
// UsageError naming `flag`.
int64_t parseSize(const std::string& flag, const std::string& text);
// "elements" or "bytes"; throws UsageError listing them.
std::string parseParamUnit(const std::string& text);

// One size of the sweep.
struct SweepPoint {
  int64_t target = 0;  // the bytes asked for
  int64_t value = 0;   // the param's value
  Program program;     // with the param set to it
  CommVolume comm;     // the measured communication at that value
};

struct SweepPlan {
  std::vector<SweepPoint> points;
  std::string comm;  // name of the measured communication
};

// The param value of every size (sizes from -b to -e by -f; those that
// give the same value are run once), each program compiled with `job`
// (compileOptionsFor: the world, device kind and backends of the ranks
// that run it; the cross-rank check when job.check_schedule). With
// --param-unit elements, the param counts elements of the measured
// communication, the one that moves the most bytes per run: its size is
// taken at the param's declared value d and 2d, and the value for a size S
// is the largest whose size is at most S on that line (at least 1). The
// same on every rank. Throws UsageError (exit 2) naming the size at fault.
SweepPlan planSweep(const Program& program, const SweepOptions& options, const CompileOptions& job);

// Runs every point on this rank (collective); rank 0 prints the rows and
// writes --json and --csv. Returns 0, or 1 when a check failed at some size.
int runSweep(Session& session, Bootstrap& boot, const SweepPlan& plan, const SweepOptions& options,
             const EvaluatorOptions& evaluator_options);

}  // namespace hir
