// The evaluator's own host cost per node, for every node kind: a loop of
// `iters` iterations whose body holds the node (and what it needs), run
// through Evaluator::run(); only run() is timed (the host's work to
// interpret and enqueue, not the device's), and the cost of an empty loop
// iteration is subtracted, leaving ns per node of that kind.
//
//   hir_evaluator_bench [--benchmark_filter=...]        host device
//   HIR_BENCH_DEVICE=cuda mpirun -np 1 hir_evaluator_bench  (on a GPU machine)
//
// Communications use the "auto" backend: mpi on the host (world 1, through
// MPI), nccl on cuda. A host-mode wait blocks until its communication
// completed, so its row is the completion time, not an enqueue. The
// `comm_complete` row is the same loop timed to completion (run() +
// synchronize()), for the round trip through the backend.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <cstdlib>
#include <string>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/kernel.h>
#include <hostir/session.h>

namespace {

hir::Bootstrap& bootstrap() {
  static std::unique_ptr<hir::Bootstrap> b = hir::createMpiBootstrap();
  return *b;
}

std::string deviceName() {
  const char* d = std::getenv("HIR_BENCH_DEVICE");
  return d != nullptr ? d : "host";
}

// One loop body: `nodes` nodes of kind `kind` per iteration (besides the
// loop itself and what `setup` does once before the loop).
struct Case {
  const char* kind;
  const char* body;
  int nodes;
  const char* setup = "";
  bool complete = false;  // time run() + synchronize()
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"for", "", 1},
      {"if", R"({"op": "if", "cond": "i % 2 == 0", "then": [], "else": []})", 1},
      {"set_stream", R"({"op": "set_stream", "stream": 0})", 1},
      {"sync_stream", R"({"op": "sync_stream", "stream": 1})", 1,
       R"({"op": "set_stream", "stream": 1}, {"op": "fill", "tensor": "x", "value": 0},
          {"op": "set_stream", "stream": 0},)"},
      {"allocate+deallocate",
       R"({"op": "allocate", "name": "t", "dtype": "float32", "shape": [1]},
          {"op": "deallocate", "name": "t"})",
       2},
      {"fill", R"({"op": "fill", "tensor": "x", "value": "i"})", 1},
      {"copy", R"({"op": "copy", "src": "x", "dst": "y"})", 1},
      {"check", R"({"op": "fill", "tensor": "x", "value": 0},
                   {"op": "check", "tensor": "x", "value": 0})",
       2},
      {"add", R"({"op": "add", "a": "x", "b": "x", "out": "y"})", 1},
      {"matmul", R"({"op": "matmul", "a": "m", "b": "m", "out": "mo"})", 1},
      {"kernel", R"({"op": "kernel", "name": "bench_noop", "reads": ["x"], "writes": ["y"]})", 1},
      {"communication+wait",
       R"({"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
           "output": "y", "reduce": "sum"},
          {"op": "wait", "communication": "ar"})",
       2},
      {"group+wait",
       R"({"op": "group", "name": "g", "body": [
             {"op": "communication", "name": "ga", "type": "allreduce", "input": "x",
              "output": "y", "reduce": "sum"}]},
          {"op": "wait", "communication": "g"})",
       3},  // group, its communication, wait
      {"share_mem_handles", R"({"op": "share_mem_handles", "communications": []})", 1},
      {"wait_host",
       R"({"op": "communication", "name": "arh", "type": "allreduce", "input": "x",
           "output": "y", "reduce": "sum"},
          {"op": "wait", "communication": "arh", "mode": "host"})",
       2},
      {"comm_complete",
       R"({"op": "communication", "name": "arc", "type": "allreduce", "input": "x",
           "output": "y", "reduce": "sum"},
          {"op": "wait", "communication": "arc"})",
       2, "", /*complete=*/true},
  };
  return c;
}

// Host seconds per run() (or per run() + synchronize()) of `iters`
// iterations of `c`.
double secondsPerRun(benchmark::State* state, const Case& c, int64_t iters, int repeats) {
  const std::string text = fmt::format(R"({{
    "format": "hostir/1", "name": "bench", "params": {{"iters": {}}},
    "body": [
      {{"op": "allocate", "name": "x", "dtype": "float32", "shape": [1]}},
      {{"op": "allocate", "name": "y", "dtype": "float32", "shape": [1]}},
      {{"op": "allocate", "name": "m", "dtype": "float32", "shape": [1, 1]}},
      {{"op": "allocate", "name": "mo", "dtype": "float32", "shape": [1, 1]}},
      {} {{"op": "for", "index": "i", "start": 0, "stop": "iters", "body": [{}]}}
    ]}})",
                                       iters, c.setup, c.body);
  hir::Session session(bootstrap(), hir::SessionOptions{deviceName()});
  hir::EvaluatorOptions options;
  options.check_schedule = false;  // a dry run of a million nodes is not the subject
  hir::Evaluator ev(session, hir::parseProgram(text), options);
  ev.run();  // allocations, first-use costs
  ev.synchronize();
  double seconds = 0;
  int runs = 0;
  auto once = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    ev.run();
    if (!c.complete)
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ev.synchronize();
    if (c.complete)
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++runs;
  };
  if (state != nullptr)
    for (auto _ : *state) once();
  else
    for (int r = 0; r < repeats; ++r) once();
  return seconds / runs;
}

void registerNoopKernel() {
  hir::registerKernel({"bench_noop", {"host", "cuda"}, [](const hir::KernelLaunch&) {}});
}

void BM_Node(benchmark::State& state, const Case* c) {
  const int64_t iters = state.range(0);
  // The empty loop's cost per iteration, measured alongside (per loop length).
  static std::map<int64_t, double> loop_ns_of;
  auto [it, fresh] = loop_ns_of.try_emplace(iters, 0.0);
  if (fresh) it->second = secondsPerRun(nullptr, cases()[0], iters, 20) * 1e9 / iters;
  const double loop_ns = it->second;
  const double per_run = secondsPerRun(&state, *c, iters, 0);
  const double per_iter_ns = per_run * 1e9 / static_cast<double>(iters);
  state.counters["ns_per_node"] =
      c == &cases()[0] ? per_iter_ns : (per_iter_ns - loop_ns) / c->nodes;
  state.counters["ns_per_iteration"] = per_iter_ns;
}

}  // namespace

int main(int argc, char** argv) {
  registerNoopKernel();
  for (const Case& c : cases()) {
    // Communications: few enough that the backend's queues never fill
    // (then an enqueue would wait for completions); on cuda the same for
    // every node that launches a kernel (CUDA's launch queue holds about a
    // thousand: past it, a launch waits for the GPU).
    const std::string kind = c.kind;
    const bool comm = kind.find("wait") != std::string::npos || c.complete;
    const bool launches = kind == "fill" || kind == "copy" || kind == "check" || kind == "add" ||
                          kind == "matmul" || kind == "sync_stream";
    const int64_t iters = comm ? 200 : launches && deviceName() == "cuda" ? 500 : 20000;
    benchmark::RegisterBenchmark(fmt::format("{}/{}", deviceName(), c.kind).c_str(), BM_Node, &c)
        ->Arg(iters)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
