// The evaluator on GPUs, as a compiler embeds it: the caller allocates with
// cudaMalloc, binds its buffers, runs on its own stream, and the run returns
// without blocking the host while the caller's earlier work still runs; and
// communications posted joined (on the current stream, without a completion
// event) on two streams stay ordered across iterations, buffer reuse and runs;
// and ranks as threads of one process run nccl, each on a GPU of its own,
// while thread ranks made to share a GPU are refused by name.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/cuda/test_kernels.h"
#include <hostir/bootstrap.h>
#include <hostir/error.h>
#include <hostir/json.h>
#include <hostir/evaluator.h>
#include <hostir/session.h>
#include "support/gpu_test.h"

namespace hir {
namespace {

using Clock = std::chrono::steady_clock;

void cudaOk(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

EvaluatorOptions options() {
  EvaluatorOptions o;
  o.timeout = test::testTimeout();
  return o;
}

// The issue's embedding test. Each run: the caller's stream first spins (its
// own earlier work), then uploads this run's input (seeded by rank and run)
// and poisons the output; run() must return while the spin still runs, and
// the output, read back on the same stream, must be every rank's input.
TEST(EmbeddedEvaluator, RunsOnTheCallerStreamWithCallerBuffersWithoutBlockingTheHost) {
  HIR_REQUIRE_GPUS(1);
  constexpr int kN = 1 << 16;
  constexpr double kSpinMs = 300;
  const int rank = test::world().rank(), world = test::world().world();
  const char* text = R"({
    "format": "hostir/1", "name": "embedded", "params": {"n": 65536},
    "inputs": ["in"], "outputs": ["out"],
    "body": [
      {"op": "allocate", "name": "in", "dtype": "int32", "shape": ["n"]},
      {"op": "allocate", "name": "out", "dtype": "int32", "shape": ["world", "n"]},
      {"op": "communication", "name": "ag", "type": "allgather", "input": "in", "output": "out",
       "backend": "nccl"},
      {"op": "wait", "communication": "ag"}
    ]})";
  Session session(test::world(), SessionOptions{"cuda"});
  auto ev = std::make_unique<Evaluator>(session, parseProgram(text), options());

  cudaStream_t stream = nullptr;
  int32_t *in = nullptr, *out = nullptr, *host_in = nullptr, *host_out = nullptr;
  const std::size_t in_bytes = kN * sizeof(int32_t), out_bytes = world * in_bytes;
  cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* p[4] = {};
  cudaOk(cudaMalloc(&p[0], in_bytes), "cudaMalloc");
  cudaOk(cudaMalloc(&p[1], out_bytes), "cudaMalloc");
  cudaOk(cudaMallocHost(&p[2], in_bytes), "cudaMallocHost");
  cudaOk(cudaMallocHost(&p[3], out_bytes), "cudaMallocHost");
  in = static_cast<int32_t*>(p[0]);
  out = static_cast<int32_t*>(p[1]);
  host_in = static_cast<int32_t*>(p[2]);
  host_out = static_cast<int32_t*>(p[3]);
  auto caller = session.device().wrapStream(stream);
  ev->bind("in", in, in_bytes);
  ev->bind("out", out, out_bytes);

  auto value = [](int r, int run, int k) { return r * 1000003 + run * 7919 + k; };
  for (int run = 0; run < 3; ++run) {
    for (int k = 0; k < kN; ++k) host_in[k] = value(rank, run, k);
    test::world().barrier();
    cuda::testSpin(*caller, kSpinMs);
    cudaOk(cudaMemcpyAsync(in, host_in, in_bytes, cudaMemcpyHostToDevice, stream), "upload");
    cudaOk(cudaMemsetAsync(out, 0xff, out_bytes, stream), "poison");
    const auto t0 = Clock::now();
    ev->run(stream);
    const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const cudaError_t busy = cudaStreamQuery(stream);
    cudaOk(cudaMemcpyAsync(host_out, out, out_bytes, cudaMemcpyDeviceToHost, stream), "download");
    session.device().synchronize(*caller, test::testTimeout());
    // The first run may block on NCCL connecting its channels (lazily, at
    // the first collective); later runs must not block at all.
    if (run > 0) {
      EXPECT_LT(run_ms, kSpinMs / 4) << "run " << run << " blocked the host";
      EXPECT_EQ(busy, cudaErrorNotReady)
          << "run " << run << ": the caller's stream was idle right after run()";
    }
    for (int r = 0; r < world; ++r)
      for (int k = 0; k < kN; ++k)
        ASSERT_EQ(host_out[r * kN + k], value(r, run, k))
            << "run " << run << ", chunk of rank " << r << ", element " << k;
  }
  ev->synchronize();
  // The caller's stream and buffers outlive the evaluator, which uses them
  // until it is destroyed.
  ev.reset();
  caller.reset();
  cudaOk(cudaFreeHost(host_out), "cudaFreeHost");
  cudaOk(cudaFreeHost(host_in), "cudaFreeHost");
  cudaOk(cudaFree(out), "cudaFree");
  cudaOk(cudaFree(in), "cudaFree");
  cudaOk(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

// Allreduces posted joined on stream 1 and on stream 0 in turn, into
// buffers allocated and released every iteration (so a block reused on one
// stream was last touched by a joined post on the other), poisoned before
// each post, checked on stream 0 after a sync_stream, over two runs.
TEST(EmbeddedEvaluator, JoinedPostsOnTwoStreamsStayOrderedAcrossIterationsAndRuns) {
  HIR_REQUIRE_GPUS(1);
  const char* text = R"({
    "format": "hostir/1", "name": "two_streams_joined", "params": {"n": 4096, "iters": 6},
    "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "allocate", "name": "y", "dtype": "float32", "shape": ["n"]},
      {"op": "for", "index": "i", "stop": "iters", "body": [
        {"op": "set_stream", "stream": 1},
        {"op": "allocate", "name": "sx", "dtype": "float32", "shape": ["n"]},
        {"op": "fill", "tensor": "sx", "value": -1},
        {"op": "fill", "tensor": "x", "value": "rank * 100 + i", "step": 1},
        {"op": "communication", "name": "arx", "type": "allreduce", "input": "x",
         "output": "sx", "reduce": "sum", "backend": "nccl"},
        {"op": "wait", "communication": "arx"},
        {"op": "set_stream", "stream": 0},
        {"op": "allocate", "name": "sy", "dtype": "float32", "shape": ["n"]},
        {"op": "fill", "tensor": "sy", "value": -1},
        {"op": "fill", "tensor": "y", "value": "rank * 7 + i", "step": 3},
        {"op": "communication", "name": "ary", "type": "allreduce", "input": "y",
         "output": "sy", "reduce": "sum", "backend": "nccl"},
        {"op": "wait", "communication": "ary"},
        {"op": "sync_stream", "stream": 1},
        {"op": "check", "tensor": "sx", "value": "50 * world * (world - 1) + world * i",
         "step": "world"},
        {"op": "check", "tensor": "sy", "value": "7 * world * (world - 1) / 2 + world * i",
         "step": "3 * world"},
        {"op": "deallocate", "name": "sx"},
        {"op": "deallocate", "name": "sy"}
      ]}
    ]})";
  Session session(test::world(), SessionOptions{"cuda"});
  Evaluator ev(session, parseProgram(text), options());
  ev.run();
  ev.run();
  ev.synchronize();
  const RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 2u * 6u * 2u);
  EXPECT_EQ(r.elements_checked, 2u * 6u * 2u * 4096u);
}

// Ranks as threads of one process (docs/embedding.md): each thread its own
// bootstrap of createThreadBootstraps, its own Session on its own GPU (the
// local rank's) and its own Evaluator, running nccl collectives and a ring
// of sends over iterations, seeded by rank and iteration, outputs poisoned
// before each post. One rank per visible GPU, at most 4 (one GPU: a world of
// one, which still takes NCCL's unique id through the threads' bootstrap).
// Only where the test binary is one process, so that no two processes'
// threads take the same GPUs.
const char* kThreadRanksProgram = R"({
  "format": "hostir/1", "name": "thread_ranks", "params": {"n": 1000, "iters": 3},
  "body": [
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "sum", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "all", "dtype": "float32", "shape": ["world", "n"]},
    {"op": "allocate", "name": "prev", "dtype": "float32", "shape": ["n"]},
    {"op": "for", "index": "i", "stop": "iters", "body": [
      {"op": "fill", "tensor": "x", "value": "rank * 1000 + i", "step": 1},
      {"op": "fill", "tensor": "sum", "value": -1},
      {"op": "fill", "tensor": "all", "value": -1},
      {"op": "fill", "tensor": "prev", "value": -1},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "sum",
       "reduce": "sum", "backend": "nccl"},
      {"op": "communication", "name": "ag", "type": "allgather", "input": "x", "output": "all",
       "backend": "nccl"},
      {"op": "communication", "name": "to_next", "type": "send", "tensor": "x",
       "peer": "(rank + 1) % world", "backend": "nccl"},
      {"op": "communication", "name": "from_prev", "type": "recv", "tensor": "prev",
       "peer": "(rank - 1 + world) % world", "backend": "nccl"},
      {"op": "wait", "communication": "ar"},
      {"op": "wait", "communication": "ag"},
      {"op": "wait", "communication": "from_prev"},
      {"op": "wait", "communication": "to_next"},
      {"op": "check", "tensor": "sum", "value": "500 * world * (world - 1) + world * i",
       "step": "world"},
      {"op": "check", "tensor": "all", "value": "i", "step": 1},
      {"op": "check", "tensor": "prev", "value": "(rank - 1 + world) % world * 1000 + i",
       "step": 1}
    ]}
  ]})";

// What each rank's thread saw: the report of its runs, or the error.
struct ThreadRank {
  std::string error;
  RunReport report;
};

std::vector<ThreadRank> runAsThreads(int world, const SessionOptions& session_options) {
  std::vector<std::unique_ptr<Bootstrap>> boots = createThreadBootstraps(world, test::testTimeout());
  std::vector<ThreadRank> ranks(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        Session session(*boots[r], session_options);
        Evaluator ev(session, parseProgram(kThreadRanksProgram), options());
        ev.run();
        ev.run();
        ev.synchronize();
        ranks[r].report = ev.report();
      } catch (const std::exception& e) {
        ranks[r].error = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return ranks;
}

TEST(EmbeddedEvaluator, RanksAsThreadsRunNcclEachOnAGpuOfItsOwn) {
  HIR_REQUIRE_GPUS(1);
  if (test::world().world() != 1) GTEST_SKIP() << "runs its ranks as threads of one process";
  int gpus = 0;
  cudaOk(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  const int world = std::min(gpus, 4);
  const std::vector<ThreadRank> ranks = runAsThreads(world, SessionOptions{"cuda"});
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r << " of a world of " << world);
    ASSERT_EQ(ranks[r].error, "");
    EXPECT_TRUE(ranks[r].report.ok()) << ranks[r].report.format();
    EXPECT_EQ(ranks[r].report.checks_run, 2u * 3u * 3u);
    EXPECT_EQ(ranks[r].report.elements_checked,
              2u * 3u * (1000u + static_cast<unsigned>(world) * 1000u + 1000u));
  }
}

// Two thread ranks made to share GPU 0: NCCL would fail inside
// ncclCommInitRank naming neither rank; the backend's setup refuses first,
// on both ranks alike, naming both and what to do, without ipc's advice
// (ipc needs ranks in processes).
TEST(EmbeddedEvaluator, ThreadRanksSharingAGpuAreRefusedByNcclNamingBoth) {
  HIR_REQUIRE_GPUS(1);
  if (test::world().world() != 1) GTEST_SKIP() << "runs its ranks as threads of one process";
  SessionOptions shared{"cuda"};
  shared.device_index = 0;
  const std::vector<ThreadRank> ranks = runAsThreads(2, shared);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    EXPECT_NE(ranks[r].error.find("nccl: ranks 0 and 1 both run on the GPU at PCI "),
              std::string::npos)
        << ranks[r].error;
    EXPECT_NE(ranks[r].error.find("needs a GPU of its own for each rank"), std::string::npos)
        << ranks[r].error;
    EXPECT_EQ(ranks[r].error.find("ipc"), std::string::npos) << ranks[r].error;
  }
}

}  // namespace
}  // namespace hir
