// The evaluator's own cost per node on the host device: long loops of cheap
// nodes, timed through run() + synchronize(), divided by the nodes executed.
//   control: for + if + set_stream (pure interpretation)
//   fill:    a one-element fill (interpretation + a host-stream enqueue)
//   comm:    a one-element allreduce + stream wait through the MPI backend
//            (world of 1: the post path without network time), timed to
//            completion, and timed for the host's enqueue alone
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>

#include <hostir/json.h>
#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/session.h>

namespace {

hir::Bootstrap& bootstrap() {
  static std::unique_ptr<hir::Bootstrap> b = hir::createMpiBootstrap();
  return *b;
}

// `body` runs `iters` times in a loop; `nodes` is the nodes it executes per
// iteration, the loop's own node included.
// With `enqueue_only`, only run() is timed (the host's cost to enqueue the
// nodes); the synchronization after it is not.
void runLoop(benchmark::State& state, const std::string& body, int nodes_per_iter,
             bool enqueue_only = false) {
  const int64_t iters = state.range(0);
  std::string text = fmt::format(R"({{
    "format": "hostir/1", "name": "bench", "params": {{"iters": {}}},
    "body": [
      {{"op": "allocate", "name": "x", "dtype": "float32", "shape": [1]}},
      {{"op": "for", "index": "i", "start": 0, "stop": "iters", "body": [{}]}}
    ]}})",
                                 iters, body);
  hir::Session session(bootstrap(), hir::SessionOptions{"host"});
  hir::EvaluatorOptions options;
  options.check_schedule = false;  // a dry run of a million nodes is not the subject
  hir::Evaluator ev(session, hir::parseProgram(text), options);
  ev.run();
  ev.synchronize();
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    ev.run();
    if (enqueue_only)
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ev.synchronize();
    if (!enqueue_only)
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double nodes = static_cast<double>(iters) * nodes_per_iter *
                       static_cast<double>(state.iterations());
  state.counters["ns_per_node"] = seconds * 1e9 / nodes;
}

void BM_ControlNodes(benchmark::State& state) {
  runLoop(state,
          R"({"op": "if", "cond": "i % 2 == 0", "then": [{"op": "set_stream", "stream": 0}],
              "else": [{"op": "set_stream", "stream": 0}]},
             {"op": "set_stream", "stream": 0})",
          4);  // for, if, set_stream, set_stream
}
BENCHMARK(BM_ControlNodes)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_FillNodes(benchmark::State& state) {
  runLoop(state, R"({"op": "fill", "tensor": "x", "value": "i"})", 2);
}
BENCHMARK(BM_FillNodes)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_CommNodes(benchmark::State& state) {
  runLoop(state,
          R"({"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
              "output": "x", "reduce": "sum"},
             {"op": "wait", "communication": "ar"})",
          3);
}
BENCHMARK(BM_CommNodes)->Arg(20000)->Unit(benchmark::kMillisecond);

// The host time to enqueue a communication and its stream-mode wait.
void BM_CommEnqueue(benchmark::State& state) {
  runLoop(state,
          R"({"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
              "output": "x", "reduce": "sum"},
             {"op": "wait", "communication": "ar"})",
          3, /*enqueue_only=*/true);
}
BENCHMARK(BM_CommEnqueue)->Arg(20000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
