// Graph mode on GPUs (EvaluatorOptions::graph): run 1 eager, run 2 captured,
// later runs replayed. Results are compared with the host reference on data
// seeded by rank, loop index and run: the caller uploads a new input before
// every run and poisons the output, so a replay that did not really run,
// or ran on stale data, fails. At any world size (1 GPU per rank).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <hostir/error.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>
#include "device/cuda/test_kernels.h"
#include "support/gpu_test.h"

namespace hir {
namespace {

// The NCCL library in use (not the headers) is at least major.minor.
bool ncclVersionAtLeast(int major, int minor, int* version) {
  *version = 0;
  if (ncclGetVersion(version) != ncclSuccess) return false;
  return *version >= major * 10000 + minor * 100;
}

void cudaOk(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

EvaluatorOptions graphOptions(bool graph = true) {
  EvaluatorOptions o;
  o.timeout = test::testTimeout();
  o.graph = graph;
  return o;
}

// The caller's input allreduced into the caller's output; then, in a loop,
// on two streams: an allgather, a reduce_scatter of its result, a
// broadcast from a root that moves with the loop index, and a matmul, each
// output poisoned before and checked after (the caller checks `out`).
// Checks per run: iters * 4.
constexpr int kIters = 3;
const char* kMixed = R"JSON({
  "format": "hostir/1", "name": "graph_mixed", "params": {"n": 1024, "iters": 3, "m": 32},
  "inputs": ["in"], "outputs": ["out"],
  "body": [
    {"op": "allocate", "name": "in", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "out", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "g", "dtype": "float32", "shape": ["world", "n"]},
    {"op": "allocate", "name": "rs", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "b", "dtype": "int32", "shape": ["n"]},
    {"op": "allocate", "name": "ma", "dtype": "float32", "shape": ["m", "m"]},
    {"op": "allocate", "name": "mb", "dtype": "float32", "shape": ["m", "m"]},
    {"op": "allocate", "name": "mo", "dtype": "float32", "shape": ["m", "m"]},
    {"op": "communication", "name": "ar_in", "type": "allreduce", "input": "in", "output": "out",
     "reduce": "sum", "backend": "nccl"},
    {"op": "wait", "communication": "ar_in"},
    {"op": "for", "index": "i", "stop": "iters", "body": [
      {"op": "set_stream", "stream": 1},
      {"op": "sync_stream", "stream": 0},
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "fill", "tensor": "x", "value": "rank * 100 + i", "step": 1},
      {"op": "fill", "tensor": "g", "value": -1},
      {"op": "communication", "name": "ag", "type": "allgather", "input": "x", "output": "g",
       "backend": "nccl"},
      {"op": "wait", "communication": "ag"},
      {"op": "check", "tensor": "g[world - 1]", "value": "(world - 1) * 100 + i", "step": 1},
      {"op": "set_stream", "stream": 0},
      {"op": "sync_stream", "stream": 1},
      {"op": "fill", "tensor": "rs", "value": -1},
      {"op": "communication", "name": "rsc", "type": "reduce_scatter", "input": "g",
       "output": "rs", "reduce": "sum", "backend": "nccl"},
      {"op": "wait", "communication": "rsc"},
      {"op": "check", "tensor": "rs", "value": "world * (rank * 100 + i)", "step": "world"},
      {"op": "fill", "tensor": "b", "value": "(rank == i % world) * (7 * i + 1) - 1", "step": 1},
      {"op": "communication", "name": "bc", "type": "broadcast", "input": "b", "output": "b",
       "root": "i % world", "backend": "nccl"},
      {"op": "wait", "communication": "bc"},
      {"op": "check", "tensor": "b", "value": "7 * i", "step": 1},
      {"op": "fill", "tensor": "ma", "value": 1, "step": 0},
      {"op": "fill", "tensor": "mb", "value": "i + rank", "step": 0},
      {"op": "fill", "tensor": "mo", "value": -1, "step": 0},
      {"op": "matmul", "a": "ma", "b": "mb", "out": "mo"},
      {"op": "check", "tensor": "mo", "value": "m * (i + rank)", "step": 0},
      {"op": "deallocate", "name": "x"}
    ]}
  ]})JSON";

struct CallerBuffers {
  cudaStream_t stream = nullptr;
  float *in = nullptr, *out = nullptr, *host = nullptr;
  std::size_t n = 0;
  explicit CallerBuffers(std::size_t count) : n(count) {
    cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaOk(cudaMalloc(reinterpret_cast<void**>(&in), n * sizeof(float)), "cudaMalloc");
    cudaOk(cudaMalloc(reinterpret_cast<void**>(&out), n * sizeof(float)), "cudaMalloc");
    cudaOk(cudaMallocHost(reinterpret_cast<void**>(&host), n * sizeof(float)),
           "cudaMallocHost");
  }
  ~CallerBuffers() {
    (void)cudaFreeHost(host);
    (void)cudaFree(out);
    (void)cudaFree(in);
    (void)cudaStreamDestroy(stream);
  }
};

float seeded(int rank, int run, std::size_t k) {
  return static_cast<float>(rank * 10000 + run * 100 + static_cast<int>(k % 97));
}

// One run of `ev` on the caller's stream: the input `in` (bound to the
// program's "in") gets this rank's data of run `run`, the output is
// poisoned, and after the run it is downloaded into buf.host.
void runOnFreshInput(Session& session, Evaluator& ev, CallerBuffers& buf, float* in, int run) {
  for (std::size_t k = 0; k < buf.n; ++k) buf.host[k] = seeded(test::world().rank(), run, k);
  cudaOk(cudaMemcpyAsync(in, buf.host, buf.n * sizeof(float), cudaMemcpyHostToDevice, buf.stream),
         "upload");
  cudaOk(cudaMemsetAsync(buf.out, 0xff, buf.n * sizeof(float), buf.stream), "poison");
  ev.run(buf.stream);
  cudaOk(cudaMemcpyAsync(buf.host, buf.out, buf.n * sizeof(float), cudaMemcpyDeviceToHost,
                         buf.stream),
         "download");
  auto caller = session.device().wrapStream(buf.stream);
  session.device().synchronize(*caller, test::testTimeout());
}

// Runs kMixed `runs` times on the caller's stream with a fresh input every
// run; checks the caller's output on the host after each run.
void runMixed(bool graph, int runs, RunReport* report, GraphStats* stats) {
  const int world = test::world().world();
  constexpr std::size_t kN = 1024;
  Session session(test::world(), SessionOptions{"cuda"});
  CallerBuffers buf(kN);
  {
    Evaluator ev(session, parseProgram(kMixed), graphOptions(graph));
    ev.bind("in", buf.in, kN * sizeof(float));
    ev.bind("out", buf.out, kN * sizeof(float));
    for (int run = 0; run < runs; ++run) {
      runOnFreshInput(session, ev, buf, buf.in, run);
      if (::testing::Test::HasFatalFailure()) return;
      for (std::size_t k = 0; k < kN; ++k) {
        float expected = 0;
        for (int r = 0; r < world; ++r) expected += seeded(r, run, k);
        ASSERT_EQ(buf.host[k], expected) << (graph ? "graph" : "eager") << " run " << run
                                         << ", element " << k;
      }
    }
    ev.synchronize();
    *report = ev.report();
    *stats = ev.graphStats();
  }
}

TEST(GraphMode, ReplaysComputeWhatEagerRunsComputeOnFreshInputsEveryRun) {
  HIR_REQUIRE_GPUS(1);
  constexpr int kRuns = 6;
  RunReport eager, graph;
  GraphStats eager_stats, graph_stats;
  runMixed(false, kRuns, &eager, &eager_stats);
  if (HasFatalFailure()) return;
  runMixed(true, kRuns, &graph, &graph_stats);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(eager.ok()) << eager.format();
  EXPECT_TRUE(graph.ok()) << graph.format();
  const uint64_t per_run = kIters * 4;
  EXPECT_EQ(eager.checks_run, kRuns * per_run);
  EXPECT_EQ(graph.checks_run, kRuns * per_run);
  EXPECT_EQ(graph.elements_checked, eager.elements_checked);
  EXPECT_FALSE(eager_stats.captured);
  EXPECT_EQ(eager_stats.launches, 0u);
  EXPECT_TRUE(graph_stats.captured);
  EXPECT_EQ(graph_stats.launches, static_cast<uint64_t>(kRuns - 1));  // runs 2 .. kRuns
  EXPECT_GT(graph_stats.capture_ms, 0.0);
}

// A check that expects the wrong value: every execution fails, in the eager
// run and in the graph's, and the replays' failures are counted.
TEST(GraphMode, WrongResultsInReplaysAreFoundAndCounted) {
  HIR_REQUIRE_GPUS(1);
  const char* text = R"({
    "format": "hostir/1", "name": "graph_wrong", "params": {"n": 256},
    "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": ["n"]},
      {"op": "for", "index": "i", "stop": 2, "body": [
        {"op": "fill", "tensor": "x", "value": "rank + i", "step": 1},
        {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
         "reduce": "sum", "backend": "nccl"},
        {"op": "wait", "communication": "ar"},
        {"op": "check", "tensor": "x", "value": "world * (world - 1) / 2 + world * i + 1",
         "step": "world"}]}]})";
  Session session(test::world(), SessionOptions{"cuda"});
  Evaluator ev(session, parseProgram(text), graphOptions());
  for (int run = 0; run < 5; ++run) ev.run();
  ev.synchronize();
  const RunReport r = ev.report();
  ASSERT_EQ(r.failures.size(), 1u) << r.format();
  const CheckFailure& f = r.failures[0];
  EXPECT_EQ(f.executions, 10u);
  EXPECT_EQ(f.mismatches, 10u * 256u);  // every element of every execution
  EXPECT_TRUE(f.replayed);
  EXPECT_FALSE(f.exact);
  EXPECT_EQ(f.failed_executions, 3u);  // 2 eager ones counted exactly, the graph's together
  EXPECT_EQ(ev.graphStats().launches, 4u);
}

TEST(GraphMode, AHostModeWaitIsRefusedAtLoadNamingTheNode) {
  HIR_REQUIRE_GPUS(1);
  const char* text = R"({
    "format": "hostir/1", "name": "graph_host_wait", "params": {"n": 16},
    "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
       "reduce": "sum", "backend": "nccl"},
      {"op": "wait", "communication": "ar", "mode": "host"}]})";
  Session session(test::world(), SessionOptions{"cuda"});
  try {
    Evaluator ev(session, parseProgram(text), graphOptions());
    FAIL() << "a host-mode wait was accepted in graph mode";
  } catch (const ValidationError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].path, "/body/2");
    EXPECT_NE(e.issues()[0].message.find("waits on 'ar' in host mode"), std::string::npos)
        << e.what();
  }
}

// The timeout still holds: a replay that cannot complete in time (queued
// behind the caller's own spin, which outlasts the timeout) ends
// synchronize() with a TimeoutError that says where, not a hang. (The
// abort that follows may wait for the spin: the caller's own work is not
// hostir's to cut short.)
TEST(GraphMode, SynchronizeAfterAReplayKeepsItsTimeout) {
  HIR_REQUIRE_GPUS(1);
  // One rank: a timeout fails the evaluator and aborts its communicators,
  // which is the fault tests' subject at larger worlds.
  if (test::world().world() != 1) GTEST_SKIP() << "runs at world 1";
  const char* text = R"({
    "format": "hostir/1", "name": "graph_slow", "params": {"n": 16},
    "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
       "reduce": "sum", "backend": "nccl"},
      {"op": "wait", "communication": "ar"}]})";
  Session session(test::world(), SessionOptions{"cuda"});
  EvaluatorOptions o = graphOptions();
  o.timeout = std::chrono::milliseconds(1500);
  Evaluator ev(session, parseProgram(text), o);
  ev.run();
  ev.run();
  ev.synchronize();
  // The caller's stream is held by a spin longer than the timeout; the
  // replay queued behind it cannot finish in time. The abort inside
  // synchronize() waits for the spin, and the watchdog ends a job whose
  // host is stuck for the timeout + 1 s + 1.5 s (4 s here): a spin of 4 s
  // raced it, and lost once in 16 repetitions on an H100 (the job ended,
  // exit 3). 3 s keeps a second on either side.
  cudaStream_t stream = nullptr;
  cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  {
    auto caller = session.device().wrapStream(stream);
    cuda::testSpin(*caller, 3000);
    ev.run(stream);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      ev.synchronize();
      ADD_FAILURE() << "synchronize() returned while the replay could not have completed";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("synchronize after run 3: on rank 0"),
                std::string::npos)
          << e.what();
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(s, 1.4) << "synchronize() gave up before the timeout";
    cudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the device is failed now
  }
  cudaOk(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

// NCCL keeps resources for the send/recv a graph holds, and destroying a
// communicator waits until the graphs that use it are gone: the evaluator
// destroys its graph first (it once waited out the whole timeout here).
TEST(GraphMode, AGraphOfSendsAndRecvsTearsDownPromptly) {
  HIR_REQUIRE_GPUS(1);
  const char* text = R"({
    "format": "hostir/1", "name": "graph_alltoall", "params": {"n": 4},
    "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": ["world", "n"]},
      {"op": "allocate", "name": "y", "dtype": "int32", "shape": ["world", "n"]},
      {"op": "fill", "tensor": "x", "value": "rank * 100", "step": 1},
      {"op": "fill", "tensor": "y", "value": -1},
      {"op": "communication", "name": "a2a", "type": "alltoall", "input": "x", "output": "y",
       "backend": "nccl"},
      {"op": "wait", "communication": "a2a"},
      {"op": "check", "tensor": "y[0]", "value": "rank * n", "step": 1}]})";
  Session session(test::world(), SessionOptions{"cuda"});
  EvaluatorOptions o = graphOptions();
  o.timeout = std::chrono::seconds(20);
  auto ev = std::make_unique<Evaluator>(session, parseProgram(text), o);
  for (int run = 0; run < 4; ++run) ev->run();
  ev->synchronize();
  const RunReport r = ev->report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 4u);
  const auto t0 = std::chrono::steady_clock::now();
  ev.reset();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0) << "the teardown waited";
}

// A graph holds the addresses it was captured with: binding another input
// buffer after the capture drops it, the next run captures again, and the
// result is computed from the new buffer.
TEST(GraphMode, BindingAnotherBufferAfterTheCaptureIsSeenByTheNextRun) {
  HIR_REQUIRE_GPUS(1);
  const int world = test::world().world();
  constexpr std::size_t kN = 256;
  const char* text = R"({
    "format": "hostir/1", "name": "graph_rebind", "params": {"n": 256},
    "inputs": ["in"], "outputs": ["out"],
    "body": [
      {"op": "allocate", "name": "in", "dtype": "float32", "shape": ["n"]},
      {"op": "allocate", "name": "out", "dtype": "float32", "shape": ["n"]},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "in", "output": "out",
       "reduce": "sum", "backend": "nccl"},
      {"op": "wait", "communication": "ar"}]})";
  Session session(test::world(), SessionOptions{"cuda"});
  CallerBuffers a(kN), b(kN);
  std::vector<float> host(kN);
  auto upload = [&](float* dst, float value) {
    for (std::size_t k = 0; k < kN; ++k) host[k] = value + static_cast<float>(k);
    cudaOk(cudaMemcpy(dst, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "upload");
    // From pageable memory the copy may return before its DMA lands, and
    // the evaluator's streams do not wait for the legacy default stream.
    cudaOk(cudaDeviceSynchronize(), "synchronize after the upload");
  };
  upload(a.in, 1);
  upload(b.in, 1000);
  {
    Evaluator ev(session, parseProgram(text), graphOptions());
    ev.bind("in", a.in, kN * sizeof(float));
    ev.bind("out", a.out, kN * sizeof(float));
    for (int run = 0; run < 3; ++run) ev.run();
    ev.bind("in", b.in, kN * sizeof(float));
    ev.run();
    ev.run();
    ev.synchronize();
    EXPECT_EQ(ev.graphStats().launches, 4u);  // runs 2 and 3, then the recaptured 4 and 5
  }
  cudaOk(cudaMemcpy(host.data(), a.out, kN * sizeof(float), cudaMemcpyDeviceToHost), "download");
  for (std::size_t k = 0; k < kN; ++k)
    ASSERT_EQ(host[k], static_cast<float>(world) * (1000 + static_cast<float>(k))) << k;
}

// ipc in graph mode: its message numbers are counted on the device, so
// every replay pairs its messages anew. The caller's input goes round the
// ring (get, a kernel copy) into the caller's output; in a loop, a group of
// put messages of 4 MiB (copy engine between counting kernels) and one of
// eager messages of 256 KiB + 64 B (one grid kernel each, through the
// slots), posted joined, each poisoned before and checked after. Eager and
// graph runs on fresh inputs every run, and another input buffer bound
// after run 4. At world 1 every message is to the rank itself; gpu-check
// also runs it on 2 ranks sharing a GPU (HIR_SHARE_GPUS=1).
const char* kIpcRing = R"JSON({
  "format": "hostir/1", "name": "graph_ipc_ring",
  "params": {"n": 1024, "m": 1048576, "k": 65552, "iters": 3},
  "inputs": ["in"], "outputs": ["out"],
  "body": [
    {"op": "allocate", "name": "in", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "out", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "y", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "a", "dtype": "int32", "shape": ["m"]},
    {"op": "allocate", "name": "b", "dtype": "int32", "shape": ["m"]},
    {"op": "allocate", "name": "c", "dtype": "int32", "shape": ["k"]},
    {"op": "allocate", "name": "d", "dtype": "int32", "shape": ["k"]},
    {"op": "copy", "src": "in", "dst": "x"},
    {"op": "fill", "tensor": "y", "value": -1},
    {"op": "communication", "name": "s", "type": "send", "tensor": "x",
     "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "get"},
    {"op": "communication", "name": "r", "type": "recv", "tensor": "y",
     "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "get"},
    {"op": "wait", "communication": "s"},
    {"op": "wait", "communication": "r"},
    {"op": "copy", "src": "y", "dst": "out"},
    {"op": "for", "index": "i", "stop": "iters", "body": [
      {"op": "fill", "tensor": "a", "value": "rank * 100000 + i * 1000", "step": 1},
      {"op": "fill", "tensor": "b", "value": -1},
      {"op": "group", "name": "g", "body": [
        {"op": "communication", "name": "sa", "type": "send", "tensor": "a",
         "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "put"},
        {"op": "communication", "name": "rb", "type": "recv", "tensor": "b",
         "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "put"}]},
      {"op": "wait", "communication": "g"},
      {"op": "check", "tensor": "b", "value": "(rank - 1 + world) % world * 100000 + i * 1000",
       "step": 1},
      {"op": "fill", "tensor": "c", "value": "rank * 7000 + i * 10", "step": 3},
      {"op": "fill", "tensor": "d", "value": -1},
      {"op": "group", "name": "e", "body": [
        {"op": "communication", "name": "sc", "type": "send", "tensor": "c",
         "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "eager"},
        {"op": "communication", "name": "rd", "type": "recv", "tensor": "d",
         "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "eager"}]},
      {"op": "wait", "communication": "e"},
      {"op": "check", "tensor": "d", "value": "(rank - 1 + world) % world * 7000 + i * 10",
       "step": 3}]}]})JSON";

TEST(GraphModeIpc, ReplaysOfARingPairEveryMessageAnewOnFreshInputs) {
  HIR_REQUIRE_GPUS(1);
  const int rank = test::world().rank(), world = test::world().world();
  const int prev = (rank - 1 + world) % world;
  constexpr std::size_t kN = 1024;
  constexpr int kRuns = 6, kLoop = 3;
  Session session(test::world(), SessionOptions{"cuda"});
  for (bool graph : {false, true}) {
    CallerBuffers buf(kN), other(kN);
    Evaluator ev(session, parseProgram(kIpcRing), graphOptions(graph));
    float* in = buf.in;
    ev.bind("in", in, kN * sizeof(float));
    ev.bind("out", buf.out, kN * sizeof(float));
    for (int run = 0; run < kRuns; ++run) {
      // After run 4, another input: the graph is captured again, and the
      // device's message numbers go on from where the replays left them.
      if (run == 4) {
        in = other.in;
        ev.bind("in", in, kN * sizeof(float));
      }
      runOnFreshInput(session, ev, buf, in, run);
      if (HasFatalFailure()) return;
      for (std::size_t k = 0; k < kN; ++k)
        ASSERT_EQ(buf.host[k], seeded(prev, run, k))
            << (graph ? "graph" : "eager") << " run " << run << ", element " << k;
    }
    ev.synchronize();
    const RunReport r = ev.report();
    EXPECT_TRUE(r.ok()) << (graph ? "graph: " : "eager: ") << r.format();
    EXPECT_EQ(r.checks_run, static_cast<uint64_t>(kRuns * kLoop * 2));
    EXPECT_EQ(ev.graphStats().captured, graph);
    EXPECT_EQ(ev.graphStats().launches, graph ? static_cast<uint64_t>(kRuns - 1) : 0u);
  }
}

// NCCL's symmetric windows (EvaluatorOptions::symmetric_memory): in graph
// mode (Auto) and eagerly (On), the buffers of the collectives are placed
// in them (when the NCCL in use has windows, 2.27 and later) and every
// result stays right; Off places nothing.
TEST(SymmetricMemory, NcclWindowsHoldTheCollectivesBuffersAndResultsStayRight) {
  HIR_REQUIRE_GPUS(1);
  const char* text = R"({
    "format": "hostir/1", "name": "symmetric", "params": {"n": 512, "iters": 3},
    "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "allocate", "name": "y", "dtype": "float32", "shape": ["n"]},
      {"op": "allocate", "name": "g", "dtype": "float32", "shape": ["world", "n"]},
      {"op": "for", "index": "i", "stop": "iters", "body": [
        {"op": "fill", "tensor": "x", "value": "rank + i", "step": 1},
        {"op": "fill", "tensor": "y", "value": -1},
        {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "y",
         "reduce": "sum", "backend": "nccl"},
        {"op": "wait", "communication": "ar"},
        {"op": "check", "tensor": "y", "value": "world * (world - 1) / 2 + world * i",
         "step": "world"},
        {"op": "fill", "tensor": "g", "value": -1},
        {"op": "communication", "name": "ag", "type": "allgather", "input": "x", "output": "g",
         "backend": "nccl"},
        {"op": "wait", "communication": "ag"},
        {"op": "check", "tensor": "g[world - 1]", "value": "world - 1 + i", "step": 1}]}]})";
  int version = 0;
  const bool windows = ncclVersionAtLeast(2, 27, &version);
  using S = EvaluatorOptions::Symmetric;
  for (auto [graph, mode] : {std::pair{true, S::Auto}, std::pair{false, S::On},
                             std::pair{false, S::Off}}) {
    Session session(test::world(), SessionOptions{"cuda"});
    EvaluatorOptions o = graphOptions(graph);
    o.symmetric_memory = mode;
    Evaluator ev(session, parseProgram(text), o);
    for (int run = 0; run < 4; ++run) ev.run();
    ev.synchronize();
    const RunReport r = ev.report();
    EXPECT_TRUE(r.ok()) << r.format();
    EXPECT_EQ(r.checks_run, 4u * 3u * 2u);
    const std::vector<std::string> expected =
        mode != S::Off && windows ? std::vector<std::string>{"x", "y", "g"}
                                  : std::vector<std::string>{};
    EXPECT_EQ(ev.symmetricAllocations(), expected)
        << "graph " << graph << ", NCCL " << version;
  }
}

}  // namespace
}  // namespace hir
