// For GPU tests (tests/*/*_gputest.cc, one GPU per rank, under mpirun): the
// collective decision whether this world can run them, a skip helper, the
// cuda device of this rank and the timeout of host waits. Header only: a
// support/*_test.cc would be globbed into the unit-test binary, which has
// neither MPI nor CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <hostir/device.h>
#include <hostir/settings.h>
#include "support/mpi_test.h"

namespace hir::test {

namespace gpu_test_detail {

// Whether this rank can run GPU tests: the cuda device is registered and
// available, and the node has a GPU for each of its ranks (or at least one,
// which they share, under HIR_SHARE_GPUS=1). Empty when yes.
inline std::string localGpuProblem() {
  const Bootstrap& w = world();
  std::string why;
  bool available = false;
  for (const DeviceInfo& info : registeredDevices())
    if (info.name == "cuda") available = info.available(&why);
  if (!available) return why.empty() ? "the cuda device is not registered" : why;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return "cudaGetDeviceCount failed";
  // HIR_SHARE_GPUS=1 (gpu-check's ipc step on a machine of 1 GPU): the
  // ranks share the GPUs; only tests without NCCL are run so.
  const bool shared = Settings::fromEnvironment().on(Setting::ShareGpus);
  if (count < w.localSize() && !(shared && count > 0))
    return fmt::format("{} ranks on this node but only {} GPU(s)", w.localSize(), count);
  return "";
}

}  // namespace gpu_test_detail

// Collective (same answer on every rank), computed once per process: why
// GPU tests cannot run here, or empty.
inline const std::string& gpuProblem() {
  static const std::string problem = [] {
    Bootstrap& w = world();
    const std::string mine = gpu_test_detail::localGpuProblem();
    int32_t ok = mine.empty() ? 1 : 0;
    std::vector<int32_t> all(static_cast<std::size_t>(w.world()));
    w.allgather(&ok, all.data(), sizeof(ok));
    if (!mine.empty()) return mine;
    for (int r = 0; r < w.world(); ++r)
      if (!all[r]) return fmt::format("rank {} has no usable GPU", r);
    return std::string();
  }();
  return problem;
}

// The cuda device on this rank's GPU (the one of its local rank).
inline std::unique_ptr<Device> makeCudaDevice() {
  return createDevice("cuda", world().localRank());
}

// Timeout of host waits: $HIR_TEST_TIMEOUT_S seconds, 60 when unset.
inline Duration testTimeout() {
  const char* s = std::getenv("HIR_TEST_TIMEOUT_S");
  return std::chrono::seconds(s != nullptr ? std::atoi(s) : 60);
}

}  // namespace hir::test

// Skips unless every rank has its own GPU and the world has >= n ranks. The
// skip is collective, so that no rank waits in a collective that another
// rank skipped.
#define HIR_REQUIRE_GPUS(n)                                                   \
  do {                                                                        \
    HIR_REQUIRE_WORLD_AT_LEAST(n);                                            \
    if (!::hir::test::gpuProblem().empty())                                   \
      GTEST_SKIP() << ::hir::test::gpuProblem();                              \
  } while (0)
