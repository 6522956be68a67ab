// What every kernel file of the cuda device shares (cuda_data_kernels.cu,
// cuda_copy_kernels.cu, cuda_message_kernels.cu, cuda_reduce_kernels.cu):
// the one launch path (launchKernel, in cuda_launch.cu), a kernel's first
// statement (followPrevious), the grid of a grid-stride kernel, and the
// device helpers of the copies, messages and reductions: system-scope
// loads, stores and waits, a block's and a thread's copies, and the grid's
// last block.
//
// Included by .cu files only. Each .cu is a device program of its own (no
// separable compilation), so the helpers below stay in an anonymous
// namespace, as they were in one file: every kernel file gets its own copy,
// and its kernels compile as they did.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda/cuda_kernels.h"

#include <hostir/device.h>

namespace hir::cuda {

// Every launch of the cuda device's kernels goes through here. A kernel of
// one block is launched as a programmatic dependent of the kernel before it
// on its stream (CudaDevice turns this off below compute capability 9.0):
// it may be made resident while that kernel still runs, and waits for it in
// followPrevious(), so its launch overlaps the previous kernel instead of
// following its end. Only one-block kernels: a waiting block holds its SM
// slot, and a grid of them could starve a kernel of another stream or
// process (an ipc peer under MPS) that the previous kernel waits for.
// Inside preloadKernels() it loads the kernel instead of launching it.
// Defined in cuda_launch.cu, beside the switches it reads.
cudaError_t launchKernel(const void* fn, dim3 grid, dim3 block, void** args,
                         cudaStream_t stream);

namespace {

// The first statement of every kernel of the cuda device. Under a
// programmatic launch (launchKernel) it waits until the kernel before it on
// the stream has finished and its writes are visible, as a plain launch
// would have waited; then it lets the next kernel launch. Triggering only
// after the wait keeps at most one kernel waiting behind each running one.
// Without a programmatic launch both are no-ops.
__device__ __forceinline__ void followPrevious() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Blocks of kBlockThreads for `count` items: one per kBlockThreads items,
// at most max_blocks (at least 1), with a grid-stride loop over the rest.
int blocksFor(std::size_t count, int max_blocks) {
  std::size_t needed = (count + kBlockThreads - 1) / kBlockThreads;
  std::size_t limit = max_blocks > 0 ? static_cast<std::size_t>(max_blocks) : 1;
  return static_cast<int>(needed < limit ? needed : limit);
}

// Acquire/release at system scope: the flags live in a peer GPU's memory
// (imported) or are written by a peer GPU.
__device__ uint32_t loadAcquireSys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ void storeReleaseSys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ void storeRelaxedSys(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Thread 0 of a block, after a __syncthreads() that follows the block's
// stores: one system-scope fence orders every thread's stores (the barrier
// made them thread 0's predecessors) before the release of v into *p.
__device__ void releaseBlockSys(uint32_t* p, uint32_t v) {
  __threadfence_system();
  storeReleaseSys(p, v);
}

// The release word (abort) was set.
__device__ __forceinline__ bool released(const uint32_t* release) {
  return release != nullptr && *static_cast<const volatile uint32_t*>(release) != 0;
}

// A poll looks at the release word once in this many loads of what it
// waits for: a poll is then one round trip to the memory, not two (the
// release word's load waited for the flag's, and the next flag load for
// it), and an abort still ends a wait within microseconds.
constexpr unsigned kReleaseEvery = 8;

// The calling thread waits until *word >= at_least (wrap-around safe, like
// CU_STREAM_WAIT_VALUE_GEQ) or the release word is set. `seen` is *word as
// the caller already loaded it (with acquire), so that a wait satisfied at
// once costs no load of its own.
__device__ __forceinline__ void waitAtLeast(const uint32_t* word, uint32_t at_least,
                                            uint32_t seen, const uint32_t* release) {
  for (unsigned polls = 1; static_cast<int32_t>(seen - at_least) < 0; ++polls) {
    if (polls % kReleaseEvery == 0 && released(release)) return;
    seen = loadAcquireSys(word);
  }
}

// The threads of one block copy dst[0, bytes) = src[0, bytes), 16 bytes
// per thread and step when `wide`.
__device__ void blockCopy(void* dst, const void* src, std::size_t bytes, bool wide) {
  if (wide) {
    auto* d = static_cast<uint4*>(dst);
    const auto* s = static_cast<const uint4*>(src);
    for (std::size_t k = threadIdx.x; k < bytes / 16; k += blockDim.x) d[k] = s[k];
  } else {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (std::size_t k = threadIdx.x; k < bytes; k += blockDim.x) d[k] = s[k];
  }
}

// Vectors per thread that copyVectorsInBatches loads before it stores any.
constexpr int kCopyBatch = 4;

// The calling thread's vectors of dst = src (`vectors` of 16 bytes): first,
// first + step, ..., kCopyBatch of them loaded before any is stored (over
// NVLink a load is a round trip; a batch is one).
__device__ void copyVectorsInBatches(void* dst, const void* src, std::size_t vectors,
                                     std::size_t first, std::size_t step) {
  auto* d = static_cast<uint4*>(dst);
  const auto* s = static_cast<const uint4*>(src);
  for (std::size_t base = first; base < vectors; base += step * kCopyBatch) {
    uint4 x[kCopyBatch];
#pragma unroll
    for (int b = 0; b < kCopyBatch; ++b)
      if (base + b * step < vectors) x[b] = s[base + b * step];
#pragma unroll
    for (int b = 0; b < kCopyBatch; ++b)
      if (base + b * step < vectors) d[base + b * step] = x[b];
  }
}

// Thread 0 of each block of a grid copy, after a barrier that follows the
// block's stores: fences them at system scope (as releaseBlockSys; not
// when the copy only reads what a peer waits for, `publish` false: its
// stores are the caller's own, which the kernel's end orders before the
// stream's next work) and counts the block in *arrivals. True for the last
// block to arrive, whose thread 0 has then seen every other block's count
// (and, through its fence, its stores) and has reset *arrivals to 0 for the
// next launch.
__device__ bool lastBlockToArrive(uint32_t* arrivals, bool publish) {
  if (publish) __threadfence_system();
  if (atomicAdd(arrivals, 1u) + 1 != gridDim.x) return false;
  __threadfence();
  *arrivals = 0;
  return true;
}

}  // namespace

}  // namespace hir::cuda
