// The CUDA device's reduce kernels (Device::reduce, DeviceMessages::reduce):
// dst = the sources combined, by a grid, and with a MessageStep (messages.h)
// its waits, pushes and signals: fused into one block for small elements
// (in lines or not), one grid kernel for mid sizes, or kernels of their own
// around the grid's reduction.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda/cuda_message_common.cuh"
#include "device/cuda/cuda_reduce_arith.cuh"
#include "device/messages.h"

#include <hostir/types.h>

namespace hir::cuda {

namespace {

// Whether small reductions in lines load their sources at once
// (setSpreadSources).
std::atomic<bool> spreadSources{true};

// Which reduce kernel does a MessageStep's reduction: Place, reduceKernel
// (any grid), which finds the ring sources in their slots from the counters;
// Fused, reduceFusedKernel or reduceLinesKernel (one block), which also
// wait before and signal and advance after; Grid, reduceGridKernel (a grid
// whose every block waits, and whose last block signals and advances).
enum class SyncMode : int { Place, Fused, Grid };

// Source j's number v, from its counter when it has one.
__device__ __forceinline__ uint32_t numberOf(const SyncSources& y, int j) {
  return y.number[j] +
         (y.counter[j] != nullptr ? *static_cast<const volatile uint32_t*>(y.counter[j]) : 0u);
}

// One block: thread j < n takes source j's number into v[j] (from
// `numbers` and its wait word's first load from `seen`, or both read now
// when null) and waits for its semaphore (or the release word); then the
// whole block goes on.
__device__ void syncWait(const SyncSources& y, int n, uint32_t* v, const uint32_t* numbers,
                         const uint32_t* seen) {
  const int j = static_cast<int>(threadIdx.x);
  if (j < n) {
    uint32_t first = 0;
    if (numbers != nullptr) {
      v[j] = numbers[j];
      first = seen[j];
    } else {
      readPart(y.counter[j], y.number[j], y.wait[j], v[j], first);
    }
    if (y.wait[j] != nullptr) waitAtLeast(y.wait[j], v[j], first, y.release);
  }
  __syncthreads();
}

// One block, after its reads and writes: a barrier (every thread has
// consumed what it read), then thread 0 stores each v[j] into source j's
// signal and advances its counter, in source order (signalSources, which a
// grid's last block calls alone). The signals say the
// sources were read ("consumed", "free"), and no peer reads what the
// reduction wrote because of them: relaxed stores, which wait for nothing.
__device__ void signalSources(const SyncSources& y, int n, const uint32_t* v) {
  for (int j = 0; j < n; ++j) {  // in order, as syncCopies signals
    if (y.signal[j] != nullptr) storeRelaxedSys(y.signal[j], v[j]);
    if (y.counter[j] != nullptr && y.advance[j] != 0)
      *y.counter[j] = v[j] - y.number[j] + y.advance[j];
  }
}
__device__ void syncSignal(const SyncSources& y, int n, const uint32_t* v) {
  __syncthreads();
  if (threadIdx.x == 0) signalSources(y, n, v);
}

// The pushes, the waits and the signals of a reduction too large for one
// block (or of no elements), around the grid's reduce kernel.
__global__ void syncKernel(SyncSources y, int n, bool wait, bool signal) {
  followPrevious();
  __shared__ uint32_t v[kMaxReduceSources];
  if (wait && y.pushes > 0) syncPush(y, nullptr);
  if (wait) {
    syncWait(y, n, v, nullptr, nullptr);
  } else {
    if (static_cast<int>(threadIdx.x) < n) v[threadIdx.x] = numberOf(y, threadIdx.x);
    __syncthreads();
  }
  if (signal) syncSignal(y, n, v);
}

// Source j where it is when the kernel runs: a ring source in the slot of
// its number (v[j], or its counter's when v is null).
__device__ __forceinline__ const void* placeSource(const ReduceSources& srcs,
                                                  const SyncSources& y, int j,
                                                  const uint32_t* v) {
  const char* p = static_cast<const char*>(srcs.p[j]);
  if (((y.slotted >> j) & 1u) == 0) return p;
  const uint32_t number = v != nullptr ? v[j] : numberOf(y, j);
  return p + static_cast<std::size_t>(number & y.mask) * y.stride;
}

// Every source where it is (placeSource). Unrolled: the result stays in
// registers.
__device__ __forceinline__ ReduceSources placeSources(const ReduceSources& srcs,
                                                      const SyncSources& y, const uint32_t* v) {
  ReduceSources at;
#pragma unroll
  for (int j = 0; j < static_cast<int>(kMaxReduceSources); ++j)
    at.p[j] = placeSource(srcs, y, j, v);
  return at;
}

// Source j of a fused reduction where it is when the kernel runs: in the
// slot of its number v[j] when it is in a ring. The pointer is picked by
// selects, not by indexing the parameter with j, which would copy the
// parameter to the stack.
__device__ __forceinline__ const void* sourceAt(const ReduceSources& given, const SyncSources& y,
                                                const uint32_t* v, int j) {
  const char* p = nullptr;
#pragma unroll
  for (int i = 0; i < static_cast<int>(kMaxReduceSources); ++i)
    if (i == j) p = static_cast<const char*>(given.p[i]);
  return (y.slotted >> j) & 1u ? p + static_cast<std::size_t>(v[j] & y.mask) * y.stride : p;
}

// The fused reduction when sources are in lines (small: one block), in
// batches of units per thread, combining in source order as reduceElement
// does. The loop over sources is not unrolled: its code is one source's,
// fetched once. Unrolled to kMaxReduceSources, a kernel of few sources
// would jump over the copies of the others' (docs/ipc.md, "Lines").
template <class A, ReduceOp Op>
__device__ void reduceLines(typename A::S* dst, const ReduceSources& given, const SyncSources& y,
                            const uint32_t* v, int n, std::size_t count) {
  using S = typename A::S;
  using Unit = LineUnit<S>;
  const std::size_t units = (count + Unit::kElems - 1) / Unit::kElems, step = blockDim.x;
  for (std::size_t base = threadIdx.x; base < units; base += step * kLineBatch) {
    Unit acc[kLineBatch]{}, in[kLineBatch]{};
    loadUnits<S>(acc, sourceAt(given, y, v, 0), (y.inline_sources & 1u) != 0, lineFlag(v[0]),
                 base, step, units, count, y.release);
#pragma unroll 1
    for (int j = 1; j < n; ++j) {
      loadUnits<S>(in, sourceAt(given, y, v, j), ((y.inline_sources >> j) & 1u) != 0,
                   lineFlag(v[j]), base, step, units, count, y.release);
#pragma unroll
      for (int b = 0; b < kLineBatch; ++b)
#pragma unroll
        for (int e = 0; e < Unit::kElems; ++e)
          acc[b].e[e] = A::template combine<Op>(in[b].e[e], acc[b].e[e]);
    }
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b)
#pragma unroll
      for (int e = 0; e < Unit::kElems; ++e) {
        const std::size_t k = (base + b * step) * Unit::kElems + e;
        if (base + b * step >= units || k >= count) continue;
        if constexpr (Op == ReduceOp::Avg) acc[b].e[e] = A::divide(acc[b].e[e], n);
        dst[k] = acc[b].e[e];
      }
  }
}

// reduceLines for few elements, when every (source, unit) pair has a
// thread of its own (n x units <= blockDim.x): thread t loads unit t % units
// of source t / units (polling its lines, as reduceLines does) into shared
// memory, so that every source is waited for at once, not one after the
// other (reduceLines' loop over sources is one load and one poll per source:
// n - 1 round trips to the memory after the last line lands); after a
// barrier, thread u < units combines unit u in source order, as
// reduceLines does, into the same bits.
template <class A, ReduceOp Op>
__device__ void reduceLinesSpread(typename A::S* dst, const ReduceSources& given,
                                  const SyncSources& y, const uint32_t* v, int n,
                                  std::size_t count) {
  using S = typename A::S;
  using Unit = LineUnit<S>;
  __shared__ Unit stage[kBlockThreads];
  const std::size_t units = (count + Unit::kElems - 1) / Unit::kElems;
  const std::size_t t = threadIdx.x;
  if (t < static_cast<std::size_t>(n) * units) {
    const int j = static_cast<int>(t / units);
    Unit x[kLineBatch]{};
    // step = units: the batch's other units are past the end, so one load.
    loadUnits<S>(x, sourceAt(given, y, v, j), ((y.inline_sources >> j) & 1u) != 0,
                 lineFlag(v[j]), t % units, units, units, count, y.release);
    stage[t] = x[0];
  }
  __syncthreads();
  if (t >= units) return;
  Unit acc = stage[t];
#pragma unroll 1
  for (int j = 1; j < n; ++j)
#pragma unroll
    for (int e = 0; e < Unit::kElems; ++e)
      acc.e[e] = A::template combine<Op>(stage[j * units + t].e[e], acc.e[e]);
#pragma unroll
  for (int e = 0; e < Unit::kElems; ++e) {
    const std::size_t k = t * Unit::kElems + e;
    if (k >= count) continue;
    if constexpr (Op == ReduceOp::Avg) acc.e[e] = A::divide(acc.e[e], n);
    dst[k] = acc.e[e];
  }
}

// The grid's reduction (its waits and signals, if any, are kernels of their
// own around it). wide: dst and every source are 16-byte aligned; each
// thread then takes 16 bytes of every source per step (usually once) and
// combines them element by element, and the last count % (16 / sizeof(S))
// elements go one by one. Each element is read from every source before it
// is written: dst may be a source. The sources are placed once and
// unrolled: the fused kernel's batches, or each source placed where it is
// used, were slower here (docs/performance.md, "ipc's kernels back to
// back, and one block's round trips").
template <class A, ReduceOp Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduceKernel(typename A::S* dst, ReduceSources given, SyncSources sync, int n,
                 std::size_t count, bool wide) {
  followPrevious();
  using S = typename A::S;
  const ReduceSources srcs = placeSources(given, sync, nullptr);
  constexpr int kPer = 16 / sizeof(S);
  using Vec = VecOf<S>;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t scalar_from = 0;
  if (wide) {
    const std::size_t vectors = count / kPer;
    for (std::size_t v = first; v < vectors; v += stride) {
      Vec acc;
      acc.bits = static_cast<const uint4*>(srcs.p[0])[v];
#pragma unroll
      for (int j = 1; j < static_cast<int>(kMaxReduceSources); ++j) {
        if (j < n) {
          Vec in;
          in.bits = static_cast<const uint4*>(srcs.p[j])[v];
#pragma unroll
          for (int e = 0; e < kPer; ++e) acc.e[e] = A::template combine<Op>(in.e[e], acc.e[e]);
        }
      }
      if constexpr (Op == ReduceOp::Avg) {
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc.e[e] = A::divide(acc.e[e], n);
      }
      reinterpret_cast<uint4*>(dst)[v] = acc.bits;
    }
    scalar_from = vectors * kPer;
  }
  for (std::size_t k = scalar_from + first; k < count; k += stride)
    dst[k] = reduceElement<A, Op>(srcs, n, k);
}

// A one-block reduction's start: its parts' numbers (readNumbers), its
// pushes, then its sources' waits (v[j]: source j's number).
// *pushed: the stamp after the pushes (stampNow); marks: the points inside
// them (null when the stamps are off).
__device__ __forceinline__ void oneBlockStart(const SyncSources& y, int n, uint32_t* v,
                                              StepNumbers& numbers, uint64_t* pushed,
                                              PushStamps* marks) {
  if (marks != nullptr && threadIdx.x == 0) *marks = PushStamps{};
  readNumbers(y, n, numbers);
  stampAt(y, marks, 0);
  if (y.pushes > 0 && !y.pushes_at_once) syncPush(y, &numbers, marks);
  *pushed = stampNow(y);
  syncWait(y, n, v, numbers.source, numbers.source_seen);
}

// A reduction with its waits, pushes and signals in one block (small
// elements, not in lines), in batches (reduceInBatches): a block reading a
// peer's memory over the link then waits one round trip per batch, not per
// vector.
template <class A, ReduceOp Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduceFusedKernel(typename A::S* dst, ReduceSources given, SyncSources sync, int n,
                      std::size_t count, bool wide) {
  const uint64_t entry = stampNow(sync);
  followPrevious();
  const uint64_t followed = stampNow(sync);
  __shared__ uint32_t v[kMaxReduceSources];
  __shared__ StepNumbers numbers;
  __shared__ PushStamps inside;
  uint64_t pushed;
  oneBlockStart(sync, n, v, numbers, &pushed, sync.stamps.ring != nullptr ? &inside : nullptr);
  reduceInBatches<A, Op>(dst, placeSources(given, sync, v), n, count, wide, threadIdx.x,
                         blockDim.x);
  const uint64_t reduced = stampNow(sync);
  syncSignal(sync, n, v);
  stampRecord(sync, KernelStampKind::ReduceFused, entry, followed, inside, pushed, reduced);
}

// reduceFusedKernel over a grid (SyncMode::Grid), for elements above one
// block's and up to a grid copy's size: thread j < n of every block reads
// source j's number and waits for it (no block advances a counter), the
// grid reduces in batches, and the last block to arrive (lastBlockToArrive,
// without fences: the signals say only that the sources were read, and
// every block's loads returned before it arrived) stores the signals and
// advances the counters. One launch where the wait kernel, the grid's
// reduceKernel and the signal kernel were three, each with the whole
// SyncSources in its parameters. No pushes (they would go once, before any
// wait) and no sources in lines.
template <class A, ReduceOp Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduceGridKernel(typename A::S* dst, ReduceSources given, SyncSources sync, int n,
                     std::size_t count, bool wide, uint32_t* arrivals) {
  followPrevious();
  __shared__ uint32_t v[kMaxReduceSources];
  syncWait(sync, n, v, nullptr, nullptr);
  reduceInBatches<A, Op>(dst, placeSources(given, sync, v), n, count, wide,
                         static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                         static_cast<std::size_t>(gridDim.x) * blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0 && lastBlockToArrive(arrivals, false)) signalSources(sync, n, v);
}

// A fused reduction with sources in lines (small: one block): a kernel of
// its own, without reduceKernel's vector and grid paths. spread: the
// sources are loaded at once (reduceLinesSpread; the launch decides, from
// the size and HIR_CUDA_SPREAD_SOURCES).
template <class A, ReduceOp Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduceLinesKernel(typename A::S* dst, ReduceSources given, SyncSources sync, int n,
                      std::size_t count, bool spread) {
  const uint64_t entry = stampNow(sync);
  followPrevious();
  const uint64_t followed = stampNow(sync);
  __shared__ uint32_t v[kMaxReduceSources];
  __shared__ StepNumbers numbers;
  __shared__ PushStamps inside;
  uint64_t pushed;
  oneBlockStart(sync, n, v, numbers, &pushed, sync.stamps.ring != nullptr ? &inside : nullptr);
  if (spread)
    reduceLinesSpread<A, Op>(dst, given, sync, v, n, count);
  else
    reduceLines<A, Op>(dst, given, sync, v, n, count);
  const uint64_t reduced = stampNow(sync);
  syncSignal(sync, n, v);
  stampRecord(sync, KernelStampKind::ReduceLines, entry, followed, inside, pushed, reduced);
}

template <class A, ReduceOp Op>
cudaError_t reduceAs(cudaStream_t stream, void* dst, ReduceSources srcs, SyncSources sync,
                     SyncMode mode, int n, std::size_t count, bool wide, int max_blocks,
                     uint32_t* arrivals) {
  using S = typename A::S;
  constexpr std::size_t kPer = 16 / sizeof(S);
  // Threads with work: one per vector, or per element of the tail.
  const std::size_t items = wide ? std::max(count / kPer, count % kPer) : count;
  S* typed = static_cast<S*>(dst);
  if (mode == SyncMode::Fused && sync.inline_sources != 0) {
    using Unit = LineUnit<S>;
    bool spread = spreadSources.load(std::memory_order_relaxed) &&
                  static_cast<std::size_t>(n) * ((count + Unit::kElems - 1) / Unit::kElems) <=
                      std::size_t{kBlockThreads};
    void* args[] = {&typed, &srcs, &sync, &n, &count, &spread};
    return launchKernel(reinterpret_cast<const void*>(&reduceLinesKernel<A, Op>), dim3(1),
                        dim3(kBlockThreads), args, stream);
  }
  if (mode == SyncMode::Grid) {  // max_blocks: the grid's blocks
    void* args[] = {&typed, &srcs, &sync, &n, &count, &wide, &arrivals};
    return launchKernel(reinterpret_cast<const void*>(&reduceGridKernel<A, Op>),
                        dim3(std::max(max_blocks, 2)), dim3(kBlockThreads), args, stream);
  }
  void* args[] = {&typed, &srcs, &sync, &n, &count, &wide};
  if (mode == SyncMode::Fused)
    return launchKernel(reinterpret_cast<const void*>(&reduceFusedKernel<A, Op>), dim3(1),
                        dim3(kBlockThreads), args, stream);
  return launchKernel(reinterpret_cast<const void*>(&reduceKernel<A, Op>),
                      dim3(blocksFor(items, max_blocks)), dim3(kBlockThreads), args, stream);
}

template <class A>
cudaError_t reduceWith(ReduceOp op, cudaStream_t stream, void* dst, const ReduceSources& srcs,
                       const SyncSources& sync, SyncMode mode, int n, std::size_t count,
                       bool wide, int max_blocks, uint32_t* arrivals) {
  switch (op) {
    case ReduceOp::Sum:
      return reduceAs<A, ReduceOp::Sum>(stream, dst, srcs, sync, mode, n, count, wide, max_blocks,
                                        arrivals);
    case ReduceOp::Prod:
      return reduceAs<A, ReduceOp::Prod>(stream, dst, srcs, sync, mode, n, count, wide,
                                         max_blocks, arrivals);
    case ReduceOp::Min:
      return reduceAs<A, ReduceOp::Min>(stream, dst, srcs, sync, mode, n, count, wide, max_blocks,
                                        arrivals);
    case ReduceOp::Max:
      return reduceAs<A, ReduceOp::Max>(stream, dst, srcs, sync, mode, n, count, wide, max_blocks,
                                        arrivals);
    case ReduceOp::Avg:
      return reduceAs<A, ReduceOp::Avg>(stream, dst, srcs, sync, mode, n, count, wide, max_blocks,
                                        arrivals);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

namespace {

cudaError_t launchSync(cudaStream_t stream, const SyncSources& sync, int n, bool wait,
                       bool signal) {
  SyncSources y = sync;
  bool w = wait, sig = signal;
  void* args[] = {&y, &n, &w, &sig};
  return launchKernel(reinterpret_cast<const void*>(&syncKernel), dim3(1), dim3(32), args,
                      stream);
}

}  // namespace

cudaError_t launchReduce(cudaStream_t stream, void* dst, const void* const* srcs, int n, DType t,
                         ReduceOp op, std::size_t count, const MessageStep* sync, int max_blocks,
                         std::size_t fuse_max, const ReduceGrid* grid,
                         const KernelStampSink* stamps) {
  if (n < 1 || n > static_cast<int>(kMaxReduceSources) || (count > 0 && dst == nullptr) ||
      srcs == nullptr)
    return cudaErrorInvalidValue;
  ReduceSources from{};
  SyncSources y{};
  bool waits_or_signals = false;
  uintptr_t addresses = reinterpret_cast<uintptr_t>(dst);
  for (int j = 0; j < n; ++j) {
    if (count > 0 && srcs[j] == nullptr) return cudaErrorInvalidValue;
    from.p[j] = srcs[j];
    addresses |= reinterpret_cast<uintptr_t>(srcs[j]);
  }
  if (sync != nullptr) {
    for (int j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>(j);
      y.counter[j] = sync->counters[k];
      y.number[j] = sync->numbers[k];
      y.advance[j] = sync->advances[k];
      y.wait[j] = sync->waits[k];
      y.signal[j] = sync->signals[k];
      if (sync->slotted[k]) y.slotted |= 1u << j;
      if (sync->inline_flags[k]) y.inline_sources |= 1u << j;
      waits_or_signals = waits_or_signals || y.wait[j] != nullptr || y.signal[j] != nullptr ||
                         (y.counter[j] != nullptr && y.advance[j] != 0);
    }
    if (sync->push_count > kMaxReduceSources || sync->pull_count != 0) return cudaErrorInvalidValue;
    placeCopies(*sync, stamps, y);
    waits_or_signals = waits_or_signals || y.pushes > 0;
    if ((y.slotted != 0 || y.push_slotted != 0) &&
        (sync->slots == 0 || (sync->slots & (sync->slots - 1)) != 0))
      return cudaErrorInvalidValue;
    addresses |= sync->stride;
  }
  // Sources in lines are read by the fused kernel only (the backend keeps
  // them under the device's inlineFlagsMax, at most fuse_max).
  const bool fuse = waits_or_signals && count * dtypeSize(t) <= fuse_max;
  if (y.inline_sources != 0 && (count == 0 || !fuse)) return cudaErrorInvalidValue;
  if (count == 0) return waits_or_signals ? launchSync(stream, y, n, true, true) : cudaSuccess;
  const bool wide = addresses % 16 == 0;
  // One kernel of one block when one block is enough for the elements; one
  // grid kernel when the caller gives one (no pushes: they go once, before
  // any wait); else the waits, the grid's reduction, then the signals.
  const bool gridded = waits_or_signals && !fuse && grid != nullptr &&
                       grid->arrivals != nullptr && y.pushes == 0;
  if (waits_or_signals && !fuse && !gridded)
    if (cudaError_t e = launchSync(stream, y, n, true, false); e != cudaSuccess) return e;
  const SyncMode mode = fuse ? SyncMode::Fused : gridded ? SyncMode::Grid : SyncMode::Place;
  const int blocks = gridded ? grid->blocks : max_blocks;
  uint32_t* arrivals = gridded ? grid->arrivals : nullptr;
  cudaError_t e = cudaErrorInvalidValue;
  switch (t) {
    case DType::Float32:
      e = reduceWith<FloatArith<float>>(op, stream, dst, from, y, mode, n, count, wide, blocks,
                                        arrivals);
      break;
    case DType::Float64:
      e = reduceWith<FloatArith<double>>(op, stream, dst, from, y, mode, n, count, wide, blocks,
                                         arrivals);
      break;
    case DType::Float16:
      e = reduceWith<SixteenArith<HalfBits>>(op, stream, dst, from, y, mode, n, count, wide,
                                             blocks, arrivals);
      break;
    case DType::BFloat16:
      e = reduceWith<SixteenArith<BFloat16Bits>>(op, stream, dst, from, y, mode, n, count, wide,
                                                 blocks, arrivals);
      break;
    case DType::Int32:
      e = reduceWith<IntArith<int32_t>>(op, stream, dst, from, y, mode, n, count, wide, blocks,
                                        arrivals);
      break;
    case DType::Int64:
      e = reduceWith<IntArith<int64_t>>(op, stream, dst, from, y, mode, n, count, wide, blocks,
                                        arrivals);
      break;
    case DType::UInt8:
      e = reduceWith<IntArith<uint8_t>>(op, stream, dst, from, y, mode, n, count, wide, blocks,
                                        arrivals);
      break;
  }
  if (e != cudaSuccess || fuse || gridded || !waits_or_signals) return e;
  return launchSync(stream, y, n, false, true);
}

void setSpreadSources(bool on) { spreadSources.store(on, std::memory_order_relaxed); }

}  // namespace hir::cuda
