// The CUDA device's message kernels (DeviceMessages::messageStep, messages.h): a
// step's pushes and pulls as one kernel of one block (messageStepKernel),
// or its pushes alone as one kernel of a grid (gridMessageStepKernel), and
// placeCopies, which puts a MessageStep into the arguments of these and of
// the fused reductions (cuda_reduce_kernels.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda/cuda_message_common.cuh"
#include "device/messages.h"

namespace hir::cuda {

namespace {

// Whether a step's small pushes in lines go each in a warp of its own, at
// the kernel's start (setPushesAtOnce).
std::atomic<bool> pushesAtOnce{true};

// The block of a message step with a part larger than one pass of
// kBlockThreads (16 KiB).
constexpr int kWideMessageThreads = 1024;

// DeviceMessages::messageStep: the pushes, then the pulls, one block (of
// kBlockThreads, or kWideMessageThreads for large parts: launchMessageStep).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) messageStepKernel(SyncSources y) {
  const uint64_t entry = stampNow(y);
  followPrevious();
  const uint64_t followed = stampNow(y);
  __shared__ StepNumbers numbers;
  __shared__ PushStamps inside;
  PushStamps* marks = y.stamps.ring != nullptr ? &inside : nullptr;
  if (marks != nullptr && threadIdx.x == 0) inside = PushStamps{};
  readNumbers(y, 0, numbers);
  stampAt(y, marks, 0);
  if (y.pushes > 0 && !y.pushes_at_once) syncPush(y, &numbers, marks);
  const uint64_t pushed = stampNow(y);
  if (y.pulls > 0)
    syncCopies(y, y.pull, y.pulls, y.pull_slotted, false, numbers.pull, numbers.pull_seen);
  const uint64_t pulled = stampNow(y);
  stampRecord(y, KernelStampKind::MessageStep, entry, followed, inside, pushed, pulled);
}

// DeviceMessages::messageStep of pushes only, over a grid (launchGridMessageStep):
// blocks [first_block[k], first_block[k + 1]) are push k's. Thread 0 of
// each block reads the push's number and waits for its slot (as
// syncCopies' pushes do), the push's blocks copy it, and the last block to
// arrive (lastBlockToArrive, after each block's system-scope fence) stores
// every push's signal and advances its counter, in push order (parts of
// one lane signal one word). Every wait is for a peer's earlier signal,
// never for one of this step's: all the parts move at once, on as many
// links as they have peers, where one block or one copy engine took them
// one after the other.
struct GridPushes {
  CopyArgs push[kMaxReduceSources];
  int first_block[kMaxReduceSources + 1];
  int count;
  uint32_t slotted;  // bit k: push k is in a ring (slot v % (mask + 1), of `stride` bytes)
  uint32_t mask;
  std::size_t stride;
  const uint32_t* release;
  bool wide;  // every push's ends, size and the stride are 16-byte multiples
};

// g.push[k] for the k of this block, picked with constant indices (an index
// that varies would copy the parameter to local memory).
__device__ __forceinline__ int gridPushOf(const GridPushes& g) {
  int k = 0;
#pragma unroll
  for (int i = 1; i < static_cast<int>(kMaxReduceSources); ++i)
    if (i < g.count && static_cast<int>(blockIdx.x) >= g.first_block[i]) k = i;
  return k;
}

__global__ void __launch_bounds__(kGridCopyThreads)
    gridMessageStepKernel(GridPushes g, uint32_t* arrivals) {
  followPrevious();
  __shared__ CopyArgs p;
  __shared__ uint32_t v;
  __shared__ int k, blocks, block;
  if (threadIdx.x == 0) {
    k = gridPushOf(g);
#pragma unroll
    for (int i = 0; i < static_cast<int>(kMaxReduceSources); ++i)
      if (i == k) {
        p = g.push[i];
        blocks = g.first_block[i + 1] - g.first_block[i];
        block = static_cast<int>(blockIdx.x) - g.first_block[i];
      }
    uint32_t seen = 0;
    readPart(p.counter, p.number, p.wait, v, seen);
    if (p.wait != nullptr) waitAtLeast(p.wait, v - p.wait_back, seen, g.release);
  }
  __syncthreads();
  const std::size_t slot = (g.slotted >> k) & 1u ? (v & g.mask) * g.stride : 0;
  const std::size_t first = static_cast<std::size_t>(block) * blockDim.x + threadIdx.x;
  const std::size_t step = static_cast<std::size_t>(blocks) * blockDim.x;
  if (g.wide) {
    copyVectorsInBatches(p.dst + slot, p.src, p.bytes / 16, first, step);
  } else {
    for (std::size_t i = first; i < p.bytes; i += step) p.dst[slot + i] = p.src[i];
  }
  __syncthreads();
  if (threadIdx.x != 0 || !lastBlockToArrive(arrivals, true)) return;
  // Every block read its push's counter before it arrived, and none has
  // advanced one: the numbers first, then the stores in order.
  uint32_t number[kMaxReduceSources];
#pragma unroll
  for (int i = 0; i < static_cast<int>(kMaxReduceSources); ++i)
    if (i < g.count)
      number[i] = g.push[i].number +
                  (g.push[i].counter != nullptr
                       ? *static_cast<const volatile uint32_t*>(g.push[i].counter)
                       : 0u);
#pragma unroll
  for (int i = 0; i < static_cast<int>(kMaxReduceSources); ++i) {
    if (i >= g.count) continue;
    const CopyArgs& q = g.push[i];
    if (q.signal != nullptr) storeReleaseSys(q.signal, number[i]);
    if (q.counter != nullptr && q.advance != 0) *q.counter = number[i] - q.number + q.advance;
  }
}

// Whether pushLinesAtOnce can do m's pushes (y: their arguments): each in
// lines, of at most kAtOnceLineBytes, not direct, and no two sharing a
// counter or a signal (whose stores must otherwise be in push order).
bool linesAtOnce(const MessageStep& m, const SyncSources& y) {
  for (std::size_t k = 0; k < m.push_count; ++k) {
    const CopyArgs& p = y.push[k];
    if (((y.push_inline >> k) & 1u) == 0 || p.bytes > kAtOnceLineBytes || p.direct != nullptr)
      return false;
    for (std::size_t i = 0; i < k; ++i)
      if ((p.counter != nullptr && p.counter == y.push[i].counter) ||
          (p.signal != nullptr && p.signal == y.push[i].signal))
        return false;
  }
  return true;
}

}  // namespace

void placeCopies(const MessageStep& m, const KernelStampSink* stamps, SyncSources& y) {
  uintptr_t addresses = m.stride;
  auto place = [&](const MessageStep::Copy& c, bool push, CopyArgs& to, uint32_t& slotted,
                   uint32_t& lines, std::size_t k) {
    to = CopyArgs{c.counter,
                  c.number,
                  c.advance,
                  c.wait_back,
                  c.wait,
                  static_cast<char*>(c.dst),
                  static_cast<const char*>(c.src),
                  c.bytes,
                  c.signal,
                  static_cast<char*>(c.direct),
                  c.posted,
                  c.mark};
    if (c.slotted) slotted |= 1u << k;
    if (c.inline_flags) lines |= 1u << k;
    if (!asksDirect(c, push)) {
      to.direct = nullptr;
      to.posted = nullptr;
      to.mark = nullptr;
    }
    addresses |= reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(c.src) |
                 reinterpret_cast<uintptr_t>(to.direct) | c.bytes;
  };
  for (std::size_t k = 0; k < m.push_count; ++k)
    place(m.pushes[k], true, y.push[k], y.push_slotted, y.push_inline, k);
  for (std::size_t k = 0; k < m.pull_count; ++k)
    place(m.pulls[k], false, y.pull[k], y.pull_slotted, y.pull_inline, k);
  y.pushes = static_cast<int>(m.push_count);
  y.pulls = static_cast<int>(m.pull_count);
  y.copies_wide = addresses % 16 == 0;
  y.release = m.release;
  y.mask = m.slots - 1;
  y.stride = m.stride;
  y.pushes_at_once = m.push_count > 0 && pushesAtOnce.load(std::memory_order_relaxed) &&
                     linesAtOnce(m, y);
  if (stamps != nullptr) y.stamps = *stamps;
}

namespace {

// A step with parts in rings has a power of two of slots.
bool ringsValid(const MessageStep& step, const SyncSources& y) {
  return (y.push_slotted == 0 && y.pull_slotted == 0) ||
         (step.slots != 0 && (step.slots & (step.slots - 1)) == 0);
}

}  // namespace

cudaError_t launchMessageStep(cudaStream_t stream, const MessageStep& step,
                              const KernelStampSink* stamps) {
  if (step.push_count > kMaxReduceSources || step.pull_count > kMaxReduceSources)
    return cudaErrorInvalidValue;
  SyncSources y{};
  placeCopies(step, stamps, y);
  if (!ringsValid(step, y)) return cudaErrorInvalidValue;
  // One pass of kBlockThreads threads moves kCopyBatch vectors each: a part
  // larger than that takes several passes, each a round trip to its
  // source (over NVLink), fewer with more threads.
  std::size_t largest = 0;
  for (std::size_t k = 0; k < step.push_count; ++k)
    largest = std::max(largest, step.pushes[k].bytes);
  for (std::size_t k = 0; k < step.pull_count; ++k)
    largest = std::max(largest, step.pulls[k].bytes);
  const bool wide = largest > std::size_t{kBlockThreads} * 16 * kCopyBatch;
  void* args[] = {&y};
  return launchKernel(wide ? reinterpret_cast<const void*>(&messageStepKernel<kWideMessageThreads>)
                           : reinterpret_cast<const void*>(&messageStepKernel<kBlockThreads>),
                      dim3(1), dim3(wide ? kWideMessageThreads : kBlockThreads), args, stream);
}

cudaError_t launchGridMessageStep(cudaStream_t stream, const MessageStep& step,
                                  uint32_t* arrivals, const int* blocks) {
  if (step.pull_count != 0 || step.push_count == 0 || step.push_count > kMaxReduceSources)
    return cudaErrorInvalidValue;
  SyncSources y{};
  placeCopies(step, nullptr, y);
  if (y.push_inline != 0 || !ringsValid(step, y)) return cudaErrorInvalidValue;
  GridPushes g{};
  g.count = y.pushes;
  int total = 0;
  for (int k = 0; k < g.count; ++k) {
    if (y.push[k].direct != nullptr || blocks[k] < 1) return cudaErrorInvalidValue;
    g.push[k] = y.push[k];
    g.first_block[k] = total;
    total += blocks[k];
  }
  g.first_block[g.count] = total;
  g.slotted = y.push_slotted;
  g.mask = y.mask;
  g.stride = y.stride;
  g.release = y.release;
  g.wide = y.copies_wide;
  void* args[] = {&g, &arrivals};
  return launchKernel(reinterpret_cast<const void*>(&gridMessageStepKernel), dim3(total),
                      dim3(kGridCopyThreads), args, stream);
}

void setPushesAtOnce(bool on) { pushesAtOnce.store(on, std::memory_order_relaxed); }

}  // namespace hir::cuda
