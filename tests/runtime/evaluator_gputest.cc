// The evaluator on GPUs, as a compiler embeds it: the caller allocates with
// cudaMalloc, binds its buffers, runs on its own stream, and the run returns
// without blocking the host while the caller's earlier work still runs; and
// communications posted joined (on the current stream, without a completion
// event) on two streams stay ordered across iterations, buffer reuse and runs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "device/cuda/test_kernels.h"
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

}  // namespace
}  // namespace hir
