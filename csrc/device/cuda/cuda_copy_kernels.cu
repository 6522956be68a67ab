// The CUDA device's copy kernels: a plain copy (for small copies, which a
// kernel starts sooner than a copy engine), and the copies of ipc's
// semaphore protocol: the signaled copy (wait, copy, release a value) and
// the counted step (its number from a counter in device memory), each by
// one block or by a grid whose last block signals, and the copy of a
// counted step's slot.
#include <cuda_runtime.h>

#include <algorithm>

#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"
#include "device/messages.h"

namespace hir::cuda {

namespace {

// The whole grid copies dst[0, bytes) = src[0, bytes): 16 bytes per thread
// and step when both ends and the size allow it (`wide`), otherwise one byte.
__device__ void gridCopy(void* dst, const void* src, std::size_t bytes, bool wide) {
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  if (wide) {
    auto* d = static_cast<uint4*>(dst);
    const auto* s = static_cast<const uint4*>(src);
    for (std::size_t k = first; k < bytes / 16; k += stride) d[k] = s[k];
  } else {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (std::size_t k = first; k < bytes; k += stride) d[k] = s[k];
  }
}

__global__ void copyKernel(void* dst, const void* src, std::size_t bytes, bool wide) {
  followPrevious();
  gridCopy(dst, src, bytes, wide);
}

// One block: thread 0 waits until *wait_addr >= at_least (wrap-around safe,
// like CU_STREAM_WAIT_VALUE_GEQ), the block copies, then, after a barrier,
// thread 0 fences at system scope and releases `value` into *signal_addr.
// A null wait_addr or signal_addr skips that part (the kernel semaphores'
// wait alone and signal alone).
__global__ void signaledCopyKernel(void* dst, const void* src, std::size_t bytes, bool wide,
                                   const uint32_t* wait_addr, uint32_t at_least,
                                   uint32_t* signal_addr, uint32_t value) {
  followPrevious();
  if (threadIdx.x == 0 && wait_addr != nullptr)
    waitAtLeast(wait_addr, at_least, loadAcquireSys(wait_addr), nullptr);
  if (bytes > 0) {
    __syncthreads();
    blockCopy(dst, src, bytes, wide);
    __syncthreads();
  }
  if (threadIdx.x == 0 && signal_addr != nullptr) releaseBlockSys(signal_addr, value);
}

// gridCopy with kCopyBatch vectors per thread loaded before any is stored
// (over NVLink a load is a round trip; a batch is one).
__device__ void gridCopyInBatches(void* dst, const void* src, std::size_t bytes, bool wide) {
  if (!wide) return gridCopy(dst, src, bytes, wide);
  copyVectorsInBatches(dst, src, bytes / 16,
                       blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x,
                       static_cast<std::size_t>(gridDim.x) * blockDim.x);
}

// The last block's signal (lastBlockToArrive): released after a fence when
// the grid publishes its stores, else a relaxed store (every block's reads
// returned before it arrived).
__device__ void signalFromLastBlock(uint32_t* p, uint32_t v, bool publish) {
  if (publish)
    releaseBlockSys(p, v);
  else
    storeRelaxedSys(p, v);
}

// signaledCopyKernel over a grid (launchGridSignaledCopy): thread 0 of each
// block waits until *wait_addr >= at_least (none when wait_addr is null),
// the grid copies, and the last block to arrive (lastBlockToArrive)
// releases `value` into *signal_addr. One launch where a copy engine needs
// three steps (a stream wait, the copy, a stream write).
__global__ void gridSignaledCopyKernel(void* dst, const void* src, std::size_t bytes, bool wide,
                                       const uint32_t* wait_addr, uint32_t at_least,
                                       uint32_t* signal_addr, uint32_t value,
                                       uint32_t* arrivals, bool publish) {
  followPrevious();
  if (wait_addr != nullptr) {
    if (threadIdx.x == 0) waitAtLeast(wait_addr, at_least, loadAcquireSys(wait_addr), nullptr);
    __syncthreads();
  }
  gridCopyInBatches(dst, src, bytes, wide);
  __syncthreads();
  if (threadIdx.x == 0 && lastBlockToArrive(arrivals, publish))
    signalFromLastBlock(signal_addr, value, publish);
}

// One block: thread 0 reads v = *counter + offset and advances the
// counter, then waits until *wait_addr >= v - wait_back or *release != 0;
// the block copies (from and to slot v % slots of their rings when slots >
// 0); after a barrier, thread 0 fences at system scope and releases v
// into *signal_addr. Each part is skipped when its pointer is null (no
// copy: bytes == 0).
struct CountedArgs {
  uint32_t* counter;
  uint32_t offset, advance, wait_back, slots;
  const uint32_t* wait_addr;
  const uint32_t* release;
  char* dst;
  const char* src;
  std::size_t bytes, dst_stride, src_stride;
  uint32_t* signal_addr;
  bool wide;
  bool publish;  // the grid's signal publishes its stores (not a pull's: see lastBlockToArrive)
};

// Thread 0 of a counted step's block: v = *counter + offset (and, with
// `advance_now`, the counter advanced at once), then the step's wait for
// v - wait_back (or the release word). Returns v.
__device__ uint32_t countedNumberAndWait(const CountedArgs& a, bool advance_now) {
  // Both loads in flight together: the wait's address needs no number.
  const uint32_t base = *static_cast<const volatile uint32_t*>(a.counter);
  const uint32_t seen = a.wait_addr != nullptr ? loadAcquireSys(a.wait_addr) : 0u;
  const uint32_t v = base + a.offset;
  if (advance_now && a.advance != 0) *a.counter = base + a.advance;
  if (a.wait_addr != nullptr) waitAtLeast(a.wait_addr, v - a.wait_back, seen, a.release);
  return v;
}

__global__ void countedStepKernel(CountedArgs a) {
  followPrevious();
  __shared__ uint32_t value;
  if (threadIdx.x == 0) value = countedNumberAndWait(a, true);
  __syncthreads();
  const std::size_t slot = a.slots > 0 ? value & (a.slots - 1) : 0;
  blockCopy(a.dst + slot * a.dst_stride, a.src + slot * a.src_stride, a.bytes, a.wide);
  if (a.signal_addr == nullptr) return;
  __syncthreads();
  if (threadIdx.x == 0) releaseBlockSys(a.signal_addr, value);
}

// countedStepKernel over a grid (launchGridCountedStep): thread 0 of each
// block reads v = *counter + offset and waits as countedStepKernel's does;
// the grid copies (from and to slot v % slots); the last block to arrive
// (lastBlockToArrive) advances the counter (every block read it before it
// arrived) and releases v into *signal_addr.
__global__ void gridCountedStepKernel(CountedArgs a, uint32_t* arrivals) {
  followPrevious();
  __shared__ uint32_t value;
  if (threadIdx.x == 0) value = countedNumberAndWait(a, false);  // the last block advances
  __syncthreads();
  const std::size_t slot = a.slots > 0 ? value & (a.slots - 1) : 0;
  gridCopyInBatches(a.dst + slot * a.dst_stride, a.src + slot * a.src_stride, a.bytes, a.wide);
  __syncthreads();
  if (threadIdx.x != 0 || !lastBlockToArrive(arrivals, a.publish)) return;
  // Every block read the counter before it arrived.
  if (a.advance != 0) *a.counter = value - a.offset + a.advance;
  if (a.signal_addr != nullptr) signalFromLastBlock(a.signal_addr, value, a.publish);
}

// The copy of a counted step over slots, by the whole grid: every thread
// reads v = *counter + offset (the step's wait and signal are kernels of
// their own, before and after, and the last advances the counter).
__global__ void slotCopyKernel(CountedArgs a) {
  followPrevious();
  const std::size_t slot = (*a.counter + a.offset) & (a.slots - 1);
  gridCopy(a.dst + slot * a.dst_stride, a.src + slot * a.src_stride, a.bytes, a.wide);
}

// A counted step's kernel arguments: its wait when `wait`, its copy and
// signal when `copy_and_signal`.
CountedArgs countedArgs(const CountedStep& step, uint32_t advance, bool wait,
                        bool copy_and_signal) {
  CountedArgs a{};
  a.counter = step.counter;
  a.offset = step.offset;
  a.advance = advance;
  a.wait_back = step.wait_back;
  a.slots = step.slots;
  a.wait_addr = wait ? step.wait_addr : nullptr;
  a.release = step.release;
  if (copy_and_signal) {
    a.dst = static_cast<char*>(step.dst);
    a.src = static_cast<const char*>(step.src);
    a.bytes = step.bytes;
    a.dst_stride = step.dst_stride;
    a.src_stride = step.src_stride;
    a.signal_addr = step.signal_addr;
  }
  a.wide = (reinterpret_cast<uintptr_t>(a.dst) | reinterpret_cast<uintptr_t>(a.src) | a.bytes |
            a.dst_stride | a.src_stride) % 16 == 0;
  a.publish = true;
  return a;
}

}  // namespace

cudaError_t launchSlotCopy(cudaStream_t stream, const CountedStep& step, int max_blocks) {
  CountedArgs a = countedArgs(step, 0, false, true);
  const std::size_t items = a.wide ? a.bytes / 16 : a.bytes;
  void* args[] = {&a};
  return launchKernel(reinterpret_cast<const void*>(&slotCopyKernel),
                      dim3(blocksFor(items, max_blocks)), dim3(kBlockThreads), args, stream);
}

cudaError_t launchGridCountedStep(cudaStream_t stream, const CountedStep& step,
                                  uint32_t* arrivals, int blocks, bool publish) {
  CountedArgs a = countedArgs(step, step.advance, true, true);
  a.publish = publish;
  void* args[] = {&a, &arrivals};
  return launchKernel(reinterpret_cast<const void*>(&gridCountedStepKernel),
                      dim3(std::max(blocks, 2)), dim3(kGridCopyThreads), args, stream);
}

cudaError_t launchCountedStep(cudaStream_t stream, const CountedStep& step, uint32_t advance,
                              bool wait, bool copy_and_signal) {
  CountedArgs a = countedArgs(step, advance, wait, copy_and_signal);
  const std::size_t items = a.wide ? a.bytes / 16 : a.bytes;
  const int threads = static_cast<int>(std::clamp<std::size_t>((items + 31) / 32 * 32, 32, 1024));
  void* args[] = {&a};
  return launchKernel(reinterpret_cast<const void*>(&countedStepKernel), dim3(1),
                      dim3(threads), args, stream);
}

cudaError_t launchSignaledCopy(cudaStream_t stream, void* dst, const void* src,
                               std::size_t bytes, const uint32_t* wait_addr, uint32_t at_least,
                               uint32_t* signal_addr, uint32_t value) {
  const bool wide = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                     bytes) % 16 == 0;
  const std::size_t items = wide ? bytes / 16 : bytes;
  const int threads = static_cast<int>(std::clamp<std::size_t>((items + 31) / 32 * 32, 32, 1024));
  void* args[] = {&dst,       const_cast<void**>(&src), &bytes, const_cast<bool*>(&wide),
                  &wait_addr, &at_least,                &signal_addr, &value};
  return launchKernel(reinterpret_cast<const void*>(&signaledCopyKernel), dim3(1),
                      dim3(threads), args, stream);
}

cudaError_t launchGridSignaledCopy(cudaStream_t stream, void* dst, const void* src,
                                   std::size_t bytes, const uint32_t* wait_addr,
                                   uint32_t at_least, uint32_t* signal_addr, uint32_t value,
                                   uint32_t* arrivals, int blocks, bool publish) {
  const bool wide = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                     bytes) % 16 == 0;
  void* args[] = {&dst,          const_cast<void**>(&src), &bytes, const_cast<bool*>(&wide),
                  &wait_addr,    &at_least,                &signal_addr, &value,
                  &arrivals,     &publish};
  return launchKernel(reinterpret_cast<const void*>(&gridSignaledCopyKernel),
                      dim3(std::max(blocks, 2)), dim3(kGridCopyThreads), args, stream);
}

cudaError_t launchCopy(cudaStream_t stream, void* dst, const void* src, std::size_t bytes,
                       int max_blocks) {
  if (bytes == 0) return cudaSuccess;
  const bool wide = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                     bytes) % 16 == 0;
  const std::size_t items = wide ? bytes / 16 : bytes;
  const std::size_t blocks = (items + kBlockThreads - 1) / kBlockThreads;
  const int grid = static_cast<int>(std::min<std::size_t>(blocks, static_cast<std::size_t>(max_blocks)));
  void* args[] = {&dst, const_cast<void**>(&src), &bytes, const_cast<bool*>(&wide)};
  return launchKernel(reinterpret_cast<const void*>(&copyKernel), dim3(grid),
                      dim3(kBlockThreads), args, stream);
}

}  // namespace hir::cuda
