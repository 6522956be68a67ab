// How the cuda device's kernels are launched: launchKernel, the one launch
// path of every kernel file, with the switch of programmatic launches; and
// preloadKernels, which loads every kernel through it without launching.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"
#include "device/messages.h"

#include <hostir/types.h>

namespace hir::cuda {

namespace {

// Inside preloadKernels() (on its thread only): every launch (launchKernel)
// loads its kernel instead of launching it.
thread_local bool preloading = false;

// Whether one-block kernels are launched as programmatic dependents
// (setProgrammaticLaunch).
std::atomic<bool> programmatic{true};

}  // namespace

// cuda_kernel_common.cuh says what a launch does.
cudaError_t launchKernel(const void* fn, dim3 grid, dim3 block, void** args,
                         cudaStream_t stream) {
  if (preloading) {
    cudaFuncAttributes attributes{};
    return cudaFuncGetAttributes(&attributes, fn);
  }
  if (grid.x * grid.y * grid.z != 1 || !programmatic.load(std::memory_order_relaxed))
    return cudaLaunchKernel(fn, grid, block, args, 0, stream);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, fn, args);
}

void setProgrammaticLaunch(bool on) { programmatic.store(on, std::memory_order_relaxed); }

// Every (dtype, op) instantiation of every kernel of the cuda device (every
// value of types.h's tables), through the launch functions with placeholder
// arguments that nothing dereferences.
cudaError_t preloadKernels() {
  preloading = true;
  cudaError_t first = cudaSuccess;
  auto note = [&](cudaError_t e) {
    if (first == cudaSuccess) first = e;
  };
  void* p = reinterpret_cast<void*>(uintptr_t{256});
  auto* word = static_cast<uint32_t*>(p);
  const void* srcs[1] = {p};
  MessageStep lines;  // a source in lines: reduceLinesKernel
  lines.signals[0] = word;
  lines.inline_flags[0] = true;
  MessageStep fused;  // a signal, no lines: reduceFusedKernel
  fused.signals[0] = word;
  const ReduceGrid gridded{word, 2};  // above fuse_max 0: reduceGridKernel
  for (const auto& dtype : kDTypeNames) {
    const DType t = dtype.first;
    note(launchFill(nullptr, p, t, 1, 0, 0, 1));
    note(launchCheck(nullptr, p, t, 1, 0, 0, 0, nullptr, 0, 1));
    note(launchAdd(nullptr, p, p, p, t, 1, 1));
    for (const auto& op : kReduceOpNames) {
      note(launchReduce(nullptr, p, srcs, 1, t, op.first, 1, nullptr, 1, 0));
      note(launchReduce(nullptr, p, srcs, 1, t, op.first, 1, &lines, 1, 64));
      note(launchReduce(nullptr, p, srcs, 1, t, op.first, 1, &fused, 1, 64));
      note(launchReduce(nullptr, p, srcs, 1, t, op.first, 1, &fused, 1, 0, &gridded));
    }
  }
  note(launchFillRandom(nullptr, p, DType::Float32, 1, RandomPattern{}, 1));
  note(launchUnary(nullptr, UnaryArgs{.in = p, .out = p, .count = 1}, 1));
  note(launchCheckAgainst(nullptr, p, DType::Float32, p, DType::Float32, 1, 0, nullptr, 0, 1));
  note(launchCopy(nullptr, p, p, 16, 1));
  {
    MessageStep pushes;  // two pushes over a grid: gridMessageStepKernel
    pushes.push_count = 2;
    const int blocks[2] = {1, 1};
    note(launchGridMessageStep(nullptr, pushes, word, blocks));
  }
  note(launchSignaledCopy(nullptr, p, p, 16, word, 0, word, 0));
  note(launchGridSignaledCopy(nullptr, p, p, 16, word, 0, word, 0, word, 2));
  note(launchGridCountedStep(nullptr, CountedStep{.counter = word, .bytes = 16}, word, 2));
  note(launchCountedStep(nullptr, CountedStep{.counter = word}, 0, false, false));
  note(launchSlotCopy(nullptr, CountedStep{.counter = word, .bytes = 16, .slots = 1}, 1));
  note(launchSpin(nullptr, 0));
  MessageStep sync;
  sync.signals[0] = word;
  note(launchReduce(nullptr, p, srcs, 1, DType::Int32, ReduceOp::Sum, 0, &sync, 1, 0));
  note(launchMessageStep(nullptr, sync));
  MessageStep wide;  // a part of 64 KiB: the kernel's wide block
  wide.pull_count = 1;
  wide.pulls[0] = {.dst = p, .src = p, .bytes = 65536};
  note(launchMessageStep(nullptr, wide));
  preloading = false;
  return first;
}

}  // namespace hir::cuda
