// The CUDA device's data kernels: fill and check with the pattern of
// common/elements.h (element k = value + step * k), the elementwise add of
// the compute part, the multi-source reduce, and a spin kernel.
//
// The pattern must match the host's bit for bit: integer dtypes compute the
// int64 value with wrap-around and convert it as a C++ cast does; floating
// dtypes compute double(value) + double(step) * double(k) with separate
// round-to-nearest multiply and add (no fused multiply-add, which the host
// does not use either), then round to float, and from float to half or
// bfloat16, exactly as patternElement() does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "device/cuda/cuda_kernels.h"

#include <hostir/device.h>

namespace hir::cuda {

namespace {

// Inside preloadKernels() (on its thread only): every launch below loads its
// kernel instead of launching it.
thread_local bool preloading = false;

// Whether one-block kernels are launched as programmatic dependents
// (setProgrammaticLaunch).
std::atomic<bool> programmatic{true};
// Whether small reductions in lines load their sources at once
// (setSpreadSources).
std::atomic<bool> spreadSources{true};
// Whether a step's small pushes in lines go each in a warp of its own, at
// the kernel's start (setPushesAtOnce).
std::atomic<bool> pushesAtOnce{true};

// Every launch of this file goes through here. A kernel of one block is
// launched as a programmatic dependent of the kernel before it on its stream
// (CudaDevice turns this off below compute capability 9.0): it may be made
// resident while that kernel still runs, and waits for it in
// followPrevious(), so its launch overlaps the previous kernel instead of
// following its end. Only
// one-block kernels: a waiting block holds its SM slot, and a grid of them
// could starve a kernel of another stream or process (an ipc peer under MPS)
// that the previous kernel waits for.
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

// The first statement of every kernel of this file. Under a programmatic
// launch (launchKernel) it waits until the kernel before it on the stream
// has finished and its writes are visible, as a plain launch would have
// waited; then it lets the next kernel launch. Triggering only after the
// wait keeps at most one kernel waiting behind each running one. Without a
// programmatic launch both are no-ops.
__device__ __forceinline__ void followPrevious() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ int64_t exactPattern(int64_t value, int64_t step, int64_t k) {
  return static_cast<int64_t>(static_cast<uint64_t>(value) +
                              static_cast<uint64_t>(step) * static_cast<uint64_t>(k));
}

__device__ __forceinline__ double doublePattern(int64_t value, int64_t step, int64_t k) {
  return __dadd_rn(static_cast<double>(value),
                   __dmul_rn(static_cast<double>(step), static_cast<double>(k)));
}

// Per element type: make(value, step, k) gives the stored element; matches()
// compares like elementMatches() and gives got/expected as doubles.
template <class T>
struct IntElem {
  __device__ static T make(int64_t value, int64_t step, int64_t k) {
    return static_cast<T>(exactPattern(value, step, k));
  }
  __device__ static bool matches(T raw, int64_t value, int64_t step, int64_t k, double tolerance,
                                 double* got_out, double* expected_out) {
    int64_t got = static_cast<int64_t>(raw);
    int64_t expected = static_cast<int64_t>(make(value, step, k));
    *got_out = static_cast<double>(got);
    *expected_out = static_cast<double>(expected);
    if (got == expected) return true;
    if (!(tolerance > 0)) return false;
    uint64_t diff = got > expected
                        ? static_cast<uint64_t>(got) - static_cast<uint64_t>(expected)
                        : static_cast<uint64_t>(expected) - static_cast<uint64_t>(got);
    return static_cast<double>(diff) <= tolerance;
  }
};

// Floating types: Convert<T> gives to-dtype (from the double pattern) and
// to-double conversions.
template <class T>
struct Convert;
template <>
struct Convert<double> {
  __device__ static double from(double d) { return d; }
  __device__ static double toDouble(double x) { return x; }
};
template <>
struct Convert<float> {
  __device__ static float from(double d) { return __double2float_rn(d); }
  __device__ static double toDouble(float x) { return x; }
};
template <>
struct Convert<__half> {
  __device__ static __half from(double d) { return __float2half_rn(__double2float_rn(d)); }
  __device__ static double toDouble(__half x) { return __half2float(x); }
};
template <>
struct Convert<__nv_bfloat16> {
  __device__ static __nv_bfloat16 from(double d) {
    return __float2bfloat16_rn(__double2float_rn(d));
  }
  __device__ static double toDouble(__nv_bfloat16 x) { return __bfloat162float(x); }
};

template <class T>
struct FloatElem {
  __device__ static T make(int64_t value, int64_t step, int64_t k) {
    return Convert<T>::from(doublePattern(value, step, k));
  }
  __device__ static bool matches(T raw, int64_t value, int64_t step, int64_t k, double tolerance,
                                 double* got_out, double* expected_out) {
    double got = Convert<T>::toDouble(raw);
    double expected = Convert<T>::toDouble(make(value, step, k));
    *got_out = got;
    *expected_out = expected;
    if (isnan(got) || isnan(expected)) return false;
    if (got == expected) return true;  // also equal infinities
    return tolerance > 0 && fabs(got - expected) <= tolerance;
  }
};

template <class T>
__global__ void fillKernel(T* dst, std::size_t count, int64_t value, int64_t step) {
  followPrevious();
  using E = std::conditional_t<std::is_integral_v<T>, IntElem<T>, FloatElem<T>>;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += stride)
    dst[k] = E::make(value, step, static_cast<int64_t>(k));
}

// Tries to record one mismatch of `execution` in `rec`. The first failing
// execution claims rec->first_execution with a 64-bit compare-and-swap; the
// threads of that execution then take report slots one at a time, so that
// `reported` never exceeds kMaxReported. Which mismatches get the slots is
// up to the scheduling: any kMaxReported of that execution, not necessarily
// those with the smallest indices. Returns false once this execution may
// report nothing more (another execution owns the record, or it is full).
__device__ bool tryReport(CheckRecord* rec, int64_t execution, std::size_t k, double got,
                          double expected) {
  auto* first = reinterpret_cast<unsigned long long*>(&rec->first_execution);
  const unsigned long long none = static_cast<unsigned long long>(-1LL);
  const unsigned long long mine = static_cast<unsigned long long>(execution);
  unsigned long long owner = atomicCAS(first, none, mine);
  if (owner != none && owner != mine) return false;
  int* reported = &rec->reported;
  int slot = *reinterpret_cast<volatile int*>(reported);
  while (slot < CheckRecord::kMaxReported) {
    int previous = atomicCAS(reported, slot, slot + 1);
    if (previous == slot) {
      rec->index[slot] = static_cast<int64_t>(k);
      rec->got[slot] = got;
      rec->expected[slot] = expected;
      return true;
    }
    slot = previous;
  }
  return false;
}

__device__ __forceinline__ unsigned long long warpSum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// The record lives in mapped host memory, so every access crosses the bus,
// and atomics from many blocks queue there (about 1 us each on an H100: a
// check of 1M elements spent 1 ms on one `checked` add per block). So the
// kernel adds `count` to `checked` once (every element is checked), each
// block adds its mismatches with one atomic only when it found some, and a
// block stops trying to report as soon as one of its threads learns that
// reporting is over.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    checkKernel(const T* src, std::size_t count, int64_t value, int64_t step, double tolerance,
                CheckRecord* rec, int64_t execution) {
  followPrevious();
  using E = std::conditional_t<std::is_integral_v<T>, IntElem<T>, FloatElem<T>>;
  constexpr int kWarps = kBlockThreads / 32;
  __shared__ volatile int reporting_over;
  __shared__ unsigned long long warp_mismatches[kWarps];
  if (threadIdx.x == 0) reporting_over = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0 && count > 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(&rec->checked),
              static_cast<unsigned long long>(count));
  __syncthreads();

  unsigned long long mismatches = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += stride) {
    double got = 0;
    double expected = 0;
    if (E::matches(src[k], value, step, static_cast<int64_t>(k), tolerance, &got, &expected))
      continue;
    ++mismatches;
    if (!reporting_over && !tryReport(rec, execution, k, got, expected)) reporting_over = 1;
  }

  // A block with no mismatch has nothing to add (the usual case: no atomic).
  if (!__syncthreads_or(mismatches != 0)) return;
  mismatches = warpSum(mismatches);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) warp_mismatches[warp] = mismatches;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long block_mismatches = 0;
    for (int w = 0; w < kWarps; ++w) block_mismatches += warp_mismatches[w];
    atomicAdd(reinterpret_cast<unsigned long long*>(&rec->mismatches), block_mismatches);
  }
}

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spinKernel(uint64_t nanoseconds) {
  followPrevious();
  const uint64_t start = globalTimerNs();
  while (globalTimerNs() - start < nanoseconds) __nanosleep(1000);
}

int blocksFor(std::size_t count, int max_blocks) {
  std::size_t needed = (count + kBlockThreads - 1) / kBlockThreads;
  std::size_t limit = max_blocks > 0 ? static_cast<std::size_t>(max_blocks) : 1;
  return static_cast<int>(needed < limit ? needed : limit);
}

template <class T>
cudaError_t fillAs(cudaStream_t stream, void* dst, std::size_t count, int64_t value, int64_t step,
                   int max_blocks) {
  T* typed = static_cast<T*>(dst);
  void* args[] = {&typed, &count, &value, &step};
  return launchKernel(reinterpret_cast<const void*>(&fillKernel<T>),
                      dim3(blocksFor(count, max_blocks)), dim3(kBlockThreads), args,
                      stream);
}

template <class T>
cudaError_t checkAs(cudaStream_t stream, const void* src, std::size_t count, int64_t value,
                    int64_t step, double tolerance, CheckRecord* rec, int64_t execution,
                    int max_blocks) {
  const T* typed = static_cast<const T*>(src);
  void* args[] = {&typed, &count, &value, &step, &tolerance, &rec, &execution};
  return launchKernel(reinterpret_cast<const void*>(&checkKernel<T>),
                      dim3(blocksFor(count, max_blocks)), dim3(kBlockThreads), args,
                      stream);
}

}  // namespace

cudaError_t launchFill(cudaStream_t stream, void* dst, DType t, std::size_t count, int64_t value,
                       int64_t step, int max_blocks) {
  if (count == 0) return cudaSuccess;
  switch (t) {
    case DType::Float32: return fillAs<float>(stream, dst, count, value, step, max_blocks);
    case DType::Float64: return fillAs<double>(stream, dst, count, value, step, max_blocks);
    case DType::Float16: return fillAs<__half>(stream, dst, count, value, step, max_blocks);
    case DType::BFloat16:
      return fillAs<__nv_bfloat16>(stream, dst, count, value, step, max_blocks);
    case DType::Int32: return fillAs<int32_t>(stream, dst, count, value, step, max_blocks);
    case DType::Int64: return fillAs<int64_t>(stream, dst, count, value, step, max_blocks);
    case DType::UInt8: return fillAs<uint8_t>(stream, dst, count, value, step, max_blocks);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launchCheck(cudaStream_t stream, const void* src, DType t, std::size_t count,
                        int64_t value, int64_t step, double tolerance, CheckRecord* record,
                        int64_t execution, int max_blocks) {
  if (count == 0) return cudaSuccess;
  switch (t) {
    case DType::Float32:
      return checkAs<float>(stream, src, count, value, step, tolerance, record, execution,
                            max_blocks);
    case DType::Float64:
      return checkAs<double>(stream, src, count, value, step, tolerance, record, execution,
                             max_blocks);
    case DType::Float16:
      return checkAs<__half>(stream, src, count, value, step, tolerance, record, execution,
                             max_blocks);
    case DType::BFloat16:
      return checkAs<__nv_bfloat16>(stream, src, count, value, step, tolerance, record,
                                    execution, max_blocks);
    case DType::Int32:
      return checkAs<int32_t>(stream, src, count, value, step, tolerance, record, execution,
                              max_blocks);
    case DType::Int64:
      return checkAs<int64_t>(stream, src, count, value, step, tolerance, record, execution,
                              max_blocks);
    case DType::UInt8:
      return checkAs<uint8_t>(stream, src, count, value, step, tolerance, record, execution,
                              max_blocks);
  }
  return cudaErrorInvalidValue;
}

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

// Inline lines (device.h): 8 bytes, the data word low, the flag high, in
// one store and one load at system scope. Each is a single 64-bit access,
// not a vector of two 32-bit ones, which the PTX memory model may split:
// an aligned 8-byte access is not torn, over NVLink too (NCCL's LL
// protocol relies on the same).
__device__ __forceinline__ void storeLine(void* p, uint32_t data, uint32_t flag) {
  const unsigned long long line = (static_cast<unsigned long long>(flag) << 32) | data;
  asm volatile("st.volatile.global.b64 [%0], %1;" ::"l"(p), "l"(line) : "memory");
}
__device__ __forceinline__ uint2 loadLine(const void* p) {
  unsigned long long line;
  asm volatile("ld.volatile.global.b64 %0, [%1];" : "=l"(line) : "l"(p) : "memory");
  return make_uint2(static_cast<uint32_t>(line), static_cast<uint32_t>(line >> 32));
}

// device.h's inlineFlag, on the device (a constexpr host function there).
__device__ __forceinline__ uint32_t lineFlag(uint32_t v) { return v != 0 ? v : 0x80000000u; }
static_assert(inlineFlag(0) == 0x80000000u && inlineFlag(1) == 1 && inlineFlag(~0u) == ~0u,
              "lineFlag is inlineFlag");
// device.h's directMarkReset, on the device.
__device__ __forceinline__ uint32_t markReset(uint32_t v) { return v ^ 0x80000000u; }
static_assert(directMarkReset(5) == (5u ^ 0x80000000u), "markReset is directMarkReset");

// Word w of a message of `bytes` (the last one zero-padded), 4-byte loads
// when src is 4-byte aligned.
__device__ __forceinline__ uint32_t wordOf(const char* src, std::size_t bytes, std::size_t w) {
  if ((w + 1) * 4 <= bytes && reinterpret_cast<uintptr_t>(src) % 4 == 0)
    return reinterpret_cast<const uint32_t*>(src)[w];
  uint32_t x = 0;
  for (std::size_t b = 0; b < 4 && w * 4 + b < bytes; ++b)
    x |= static_cast<uint32_t>(static_cast<unsigned char>(src[w * 4 + b])) << (8 * b);
  return x;
}
__device__ __forceinline__ void putWord(char* dst, std::size_t bytes, std::size_t w, uint32_t x) {
  if ((w + 1) * 4 <= bytes && reinterpret_cast<uintptr_t>(dst) % 4 == 0) {
    reinterpret_cast<uint32_t*>(dst)[w] = x;
    return;
  }
  for (std::size_t b = 0; b < 4 && w * 4 + b < bytes; ++b)
    dst[w * 4 + b] = static_cast<char>((x >> (8 * b)) & 0xffu);
}

// The block writes the lines of src[0, bytes) into dst, flagged `flag`.
__device__ void blockPushLines(char* dst, const char* src, std::size_t bytes, uint32_t flag) {
  for (std::size_t w = threadIdx.x; w * 4 < bytes; w += blockDim.x)
    storeLine(dst + w * 8, wordOf(src, bytes, w), flag);
}

// Lines a thread loads before it looks at any: their loads are in flight
// together, so a message of kLineBatch lines per thread costs one round
// trip to the memory, not kLineBatch.
constexpr int kLineBatch = 4;

// The data words of kN lines of src, line[i] for each i (those at or past
// `lines` are skipped): every load is issued before any is looked at, then
// each line is loaded again until it holds `flag` (or the release word is
// set). The one poll of lines, for pulls and reductions alike.
template <int kN>
__device__ __forceinline__ void loadFlaggedLines(uint32_t (&word)[kN], const char* src,
                                                 const std::size_t (&line)[kN], std::size_t lines,
                                                 uint32_t flag, const uint32_t* release) {
  uint2 got[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i)
    if (line[i] < lines) got[i] = loadLine(src + line[i] * 8);
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (line[i] >= lines) continue;
    for (unsigned polls = 1; got[i].y != flag; ++polls) {
      if (polls % kReleaseEvery == 0 && released(release)) break;
      got[i] = loadLine(src + line[i] * 8);
    }
    word[i] = got[i].x;
  }
}

// The block reads the lines of src into dst[0, bytes), each once it holds
// `flag`.
__device__ void blockPullLines(char* dst, const char* src, std::size_t bytes, uint32_t flag,
                               const uint32_t* release) {
  const std::size_t words = (bytes + 3) / 4, step = blockDim.x;
  for (std::size_t base = threadIdx.x; base < words; base += step * kLineBatch) {
    std::size_t line[kLineBatch];
    uint32_t word[kLineBatch];
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b) line[b] = base + b * step;
    loadFlaggedLines(word, src, line, words, flag, release);
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b)
      if (line[b] < words) putWord(dst, bytes, line[b], word[b]);
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

// Vectors per thread that blockCopyInBatches loads before it stores any.
constexpr int kCopyBatch = 4;
// The block of a message step with a part larger than one pass of
// kBlockThreads (16 KiB).
constexpr int kWideMessageThreads = 1024;

// blockCopy for the message kernels' pushes and pulls (apart): when the
// copy takes more than one step, kCopyBatch vectors per thread are loaded
// before any is stored, so the block waits for one round trip to the
// source per batch (16 KiB at 256 threads), not per 16 bytes per thread.
// (The fused signaled and counted copies keep blockCopy: they run up to
// 1024 threads, one step up to 16 KiB, and measured no better batched.)
// The calling thread's vectors of dst = src (`vectors` of 16 bytes): first,
// first + step, ..., kCopyBatch of them loaded before any is stored.
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

__device__ void blockCopyInBatches(void* dst, const void* src, std::size_t bytes, bool wide) {
  if (!wide || bytes / 16 <= blockDim.x) return blockCopy(dst, src, bytes, wide);
  copyVectorsInBatches(dst, src, bytes / 16, threadIdx.x, blockDim.x);
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

namespace {

// Per element type: the sum as the host device computes it (compute.cc).
template <class T>
struct Add {
  __device__ static T apply(T x, T y) { return x + y; }  // float, double
};
template <>
struct Add<__half> {
  // float has more than twice half's precision: one more rounding after the
  // float add gives the exactly rounded sum, as on the host.
  __device__ static __half apply(__half x, __half y) {
    return __float2half_rn(__fadd_rn(__half2float(x), __half2float(y)));
  }
};
template <>
struct Add<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, __nv_bfloat16 y) {
    return __float2bfloat16_rn(__fadd_rn(__bfloat162float(x), __bfloat162float(y)));
  }
};
template <class T>
struct WrappingAdd {  // integers: unsigned arithmetic, no overflow UB
  __device__ static T apply(T x, T y) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  }
};

// Each element is read before it is written: out may be a or b.
template <class T>
__global__ void addKernel(T* out, const T* a, const T* b, std::size_t count) {
  followPrevious();
  using Op = std::conditional_t<std::is_integral_v<T>, WrappingAdd<T>, Add<T>>;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += stride)
    out[k] = Op::apply(a[k], b[k]);
}

template <class T>
cudaError_t addAs(cudaStream_t stream, void* out, const void* a, const void* b, std::size_t count,
                  int max_blocks) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  void* args[] = {&o, &x, &y, &count};
  return launchKernel(reinterpret_cast<const void*>(&addKernel<T>),
                      dim3(blocksFor(count, max_blocks)), dim3(kBlockThreads), args,
                      stream);
}

}  // namespace

cudaError_t launchAdd(cudaStream_t stream, void* out, const void* a, const void* b, DType t,
                      std::size_t count, int max_blocks) {
  if (count == 0) return cudaSuccess;
  switch (t) {
    case DType::Float32: return addAs<float>(stream, out, a, b, count, max_blocks);
    case DType::Float64: return addAs<double>(stream, out, a, b, count, max_blocks);
    case DType::Float16: return addAs<__half>(stream, out, a, b, count, max_blocks);
    case DType::BFloat16: return addAs<__nv_bfloat16>(stream, out, a, b, count, max_blocks);
    case DType::Int32: return addAs<int32_t>(stream, out, a, b, count, max_blocks);
    case DType::Int64: return addAs<int64_t>(stream, out, a, b, count, max_blocks);
    case DType::UInt8: return addAs<uint8_t>(stream, out, a, b, count, max_blocks);
  }
  return cudaErrorInvalidValue;
}

namespace {

// ------------------------------------------------------------------ reduce

// The sources of one reduce, by value in the kernel's parameters: a captured
// graph holds them, and nothing is allocated or copied before the launch.
struct ReduceSources {
  const void* p[kMaxReduceSources];
};

// MessageStep (device.h) by value: a captured graph holds it.
struct CopyArgs {  // a push or a pull
  uint32_t* counter;
  uint32_t number, advance, wait_back;
  const uint32_t* wait;
  char* dst;
  const char* src;
  std::size_t bytes;
  uint32_t* signal;
  char* direct;      // direct delivery (device.h): a push's other destination
  uint32_t* posted;  // a push reads it, a pull stores its number into it
  uint32_t* mark;    // a push stores its number into it when direct; a pull reads it
};
struct SyncSources {
  uint32_t* counter[kMaxReduceSources];
  uint32_t number[kMaxReduceSources];
  uint32_t advance[kMaxReduceSources];
  const uint32_t* wait[kMaxReduceSources];
  uint32_t* signal[kMaxReduceSources];
  const uint32_t* release;
  uint32_t slotted;  // bit j: source j is in a ring
  uint32_t mask;     // slots - 1
  std::size_t stride;
  CopyArgs push[kMaxReduceSources];
  CopyArgs pull[kMaxReduceSources];
  int pushes, pulls;
  uint32_t push_slotted, pull_slotted;  // bit k: push (pull) k is in a ring
  uint32_t push_inline, pull_inline;    // bit k: push (pull) k in lines (inline flags)
  uint32_t inline_sources;              // bit j: source j in lines
  bool copies_wide;  // every push's and pull's ends, size and the stride are 16-byte multiples
  bool pushes_at_once;  // pushLinesAtOnce (placeCopies says when)
  KernelStampSink stamps;  // the kernel stamps' ring; its ring null when off
};

// The kernel stamps (KernelStampSink), thread 0's view: the global timer
// now, 0 when they are off or for another thread.
__device__ __forceinline__ uint64_t stampNow(const SyncSources& y) {
  uint64_t t = 0;
  if (y.stamps.ring != nullptr && threadIdx.x == 0)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
// The points inside a kernel's pushes (thread 0's, in shared memory):
// [0] numbers read, [1] slot waits done, [2] copies done.
struct PushStamps {
  uint64_t at[3];
};
__device__ __forceinline__ void stampAt(const SyncSources& y, PushStamps* p, int k) {
  if (p != nullptr && threadIdx.x == 0) p->at[k] = stampNow(y);
}
// Thread 0 writes the kernel's record, `end` now.
__device__ __forceinline__ void stampRecord(const SyncSources& y, KernelStampKind kind,
                                            uint64_t entry, uint64_t followed,
                                            const PushStamps& inside, uint64_t pushed,
                                            uint64_t waited) {
  if (y.stamps.ring == nullptr || threadIdx.x != 0) return;
  const uint64_t end = stampNow(y);
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  KernelStamp& r = y.stamps.ring[atomicAdd(y.stamps.next, 1u) & y.stamps.mask];
  r = KernelStamp{entry,  followed, inside.at[0], inside.at[1], inside.at[2], pushed, waited,
                  end,    static_cast<uint32_t>(kind), sm};
}

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

// The numbers of a one-block kernel's parts, read at its start by threads
// of their own (pushes by threads 0.., pulls by 32.., sources by 64..), so
// that the counters' loads are in flight together instead of one phase
// after the other. A step's pushes and its pulls or sources never share a
// counter (device.h), so a push's advance cannot change what a pull reads.
// Each of those threads also loads its part's wait word (with acquire) in
// the same round trip, into `seen`: a push's slot is free long before in a
// steady stream of messages, and its wait then costs no load of its own.
struct StepNumbers {
  uint32_t push[kMaxReduceSources], pull[kMaxReduceSources], source[kMaxReduceSources];
  uint32_t push_seen[kMaxReduceSources], pull_seen[kMaxReduceSources],
      source_seen[kMaxReduceSources];
};
static_assert(kBlockThreads >= 64 + static_cast<int>(kMaxReduceSources),
              "readNumbers needs 80 threads");
// Direct delivery (device.h). A part's mark: its own word, or the word of
// its number's slot in a ring of marks.
__device__ __forceinline__ uint32_t* markOf(const SyncSources& y, const CopyArgs& p,
                                            bool slotted, uint32_t v) {
  return p.mark + (slotted ? (v & y.mask) : 0u);
}
// A pull's post, first thing in its kernel: its mark reset (no stale mark
// can equal v), then v released into the sender's `posted`: the pull's
// destination is free for the sender to write.
__device__ __forceinline__ void post(const SyncSources& y, const CopyArgs& p, bool slotted,
                                     uint32_t v) {
  storeRelaxedSys(markOf(y, p, slotted, v), markReset(v));
  storeReleaseSys(p.posted, v);
}
// A push with a direct destination: true when the receiver posted v, seen
// before its slot is free or while it waits for it (`first`: the wait
// word's first load); false once the slot is free (or the release word
// is set).
__device__ bool waitSlotOrPost(const SyncSources& y, const CopyArgs& p, uint32_t v,
                               uint32_t first) {
  const uint32_t slot_free = v - p.wait_back;
  for (unsigned polls = 1;; ++polls) {
    if (static_cast<int32_t>(loadAcquireSys(p.posted) - v) >= 0) return true;
    if (p.wait == nullptr || static_cast<int32_t>(first - slot_free) >= 0) return false;
    if (polls % kReleaseEvery == 0 && released(y.release)) return false;
    first = loadAcquireSys(p.wait);
  }
}

// A part's counter and wait word, both loads issued before either is used.
__device__ __forceinline__ void readPart(const uint32_t* counter, uint32_t number,
                                         const uint32_t* wait, uint32_t& v, uint32_t& seen) {
  const uint32_t base = counter != nullptr ? *static_cast<const volatile uint32_t*>(counter) : 0u;
  seen = wait != nullptr ? loadAcquireSys(wait) : 0u;
  v = number + base;
}
// The words of a push that pushLinesAtOnce takes: a warp's lanes hold them.
constexpr std::size_t kAtOnceLineBytes = 4 * 32;
// The warp of push k (pushLinesAtOnce): the pushes start at warp 3, past
// the threads that read the pulls' and the sources' numbers (32.. and 64..,
// readNumbers), which then run beside them up to 5 pushes.
constexpr int kFirstPushWarp = 3;

// A step's pushes when each is in lines, of at most kAtOnceLineBytes, and
// no two share a counter or a signal (placeCopies checks): each is done
// start to end by a warp of its own, the pushes at once instead of one
// after the other, with no barrier of the block in them. Every load it
// needs (the counter, the wait word, the words of the message) is issued
// before any is used: one round trip to the memory, then the stores. Its
// signal is ordered after nothing: a push in lines publishes nothing by it
// (device.h), and the pushes' signals are distinct words, so that their
// order does not show.
__device__ void pushLinesAtOnce(const SyncSources& y) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  for (int k = (warp - kFirstPushWarp % warps + warps) % warps; k < y.pushes; k += warps) {
    const CopyArgs& p = y.push[k];
    const uint32_t word =
        static_cast<std::size_t>(lane) * 4 < p.bytes ? wordOf(p.src, p.bytes, lane) : 0u;
    uint32_t v = 0, seen = 0;
    if (lane == 0) readPart(p.counter, p.number, p.wait, v, seen);
    v = __shfl_sync(0xffffffffu, v, 0);
    if (lane == 0 && p.wait != nullptr) waitAtLeast(p.wait, v - p.wait_back, seen, y.release);
    __syncwarp();
    const std::size_t slot = (y.push_slotted >> k) & 1u ? (v & y.mask) * y.stride : 0;
    if (static_cast<std::size_t>(lane) * 4 < p.bytes)
      storeLine(p.dst + slot + static_cast<std::size_t>(lane) * 8, word, lineFlag(v));
    if (lane == 0) {
      if (p.signal != nullptr) storeRelaxedSys(p.signal, v);
      if (p.counter != nullptr && p.advance != 0) *p.counter = v - p.number + p.advance;
    }
  }
}

// Every thread of the block calls it (it ends with a barrier). With
// pushes_at_once, the pushes are done here too (pushLinesAtOnce).
__device__ void readNumbers(const SyncSources& y, int n, StepNumbers& s) {
  const int t = static_cast<int>(threadIdx.x);
  if (y.pushes_at_once) {
    pushLinesAtOnce(y);
  } else if (t < y.pushes) {
    const CopyArgs& p = y.push[t];
    readPart(p.counter, p.number, p.wait, s.push[t], s.push_seen[t]);
  }
  if (t >= 32 && t < 32 + y.pulls) {
    const CopyArgs& p = y.pull[t - 32];
    readPart(p.counter, p.number, p.wait, s.pull[t - 32], s.pull_seen[t - 32]);
    if (p.posted != nullptr)
      post(y, p, ((y.pull_slotted >> (t - 32)) & 1u) != 0, s.pull[t - 32]);
  } else if (t >= 64 && t < 64 + n) {
    readPart(y.counter[t - 64], y.number[t - 64], y.wait[t - 64], s.source[t - 64],
             s.source_seen[t - 64]);
  }
  __syncthreads();
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

// One block: thread k < count reads copy k's number and waits (a push: for
// v - wait_back, its slot; a pull: for v, its message); the block copies
// each (a push into its slot, a pull out of it; inline parts as lines);
// after a barrier, thread 0 signals each copy and advances its counter, in
// order.
__device__ void syncCopies(const SyncSources& y, const CopyArgs* c, int count, uint32_t slotted,
                           bool push, const uint32_t* numbers, const uint32_t* seen,
                           PushStamps* marks = nullptr) {
  __shared__ uint32_t cv[kMaxReduceSources];
  __shared__ bool direct[kMaxReduceSources];  // delivered straight into the receiver's buffer
  const int k = static_cast<int>(threadIdx.x);
  if (k < count) {
    const CopyArgs& p = c[k];
    uint32_t first = 0;
    if (numbers != nullptr) {
      cv[k] = numbers[k];
      first = seen[k];
    } else {
      readPart(p.counter, p.number, p.wait, cv[k], first);
    }
    direct[k] = false;
    if (push && p.direct != nullptr)
      direct[k] = waitSlotOrPost(y, p, cv[k], first);
    else if (p.wait != nullptr)
      waitAtLeast(p.wait, push ? cv[k] - p.wait_back : cv[k], first, y.release);
    // A pull that posted (readNumbers): its mark says where the data is.
    if (!push && p.posted != nullptr)
      direct[k] = loadAcquireSys(markOf(y, p, ((slotted >> k) & 1u) != 0, cv[k])) == cv[k];
  }
  __syncthreads();
  stampAt(y, marks, 1);
  const uint32_t lines = push ? y.push_inline : y.pull_inline;
  bool publishes = false;  // a plain push that signals: its data must be visible first
  for (int i = 0; i < count; ++i) {
    const CopyArgs& p = c[i];
    const std::size_t slot = (slotted >> i) & 1u ? (cv[i] & y.mask) * y.stride : 0;
    char* dst = direct[i] && push ? p.direct : p.dst + (push ? slot : 0);
    const char* src = p.src + (push ? 0 : slot);
    if (direct[i] && !push) continue;  // the sender wrote it into dst
    if (!((lines >> i) & 1u)) {
      blockCopyInBatches(dst, src, p.bytes, y.copies_wide);
      publishes = publishes || (push && p.signal != nullptr);
    } else if (push) {
      blockPushLines(dst, src, p.bytes, lineFlag(cv[i]));
    } else {
      blockPullLines(dst, src, p.bytes, lineFlag(cv[i]), y.release);
    }
  }
  __syncthreads();
  stampAt(y, marks, 2);
  // One thread, in order: parts of one lane signal the same word, whose
  // value must end at the last of their numbers. A plain push's data went
  // to a peer: thread 0 fences and releases its signal. A push in lines
  // publishes nothing by its signal (its lines carry their flags), and a
  // pull's signal says what was read ("free"; every thread consumed it
  // before the barrier): relaxed stores, which wait for no earlier store.
  if (k == 0) {
    if (publishes) __threadfence_system();
    for (int i = 0; i < count; ++i) {
      const CopyArgs& p = c[i];
      if (direct[i] && push)
        storeRelaxedSys(markOf(y, p, ((slotted >> i) & 1u) != 0, cv[i]), cv[i]);
      if (p.signal != nullptr && push && !((lines >> i) & 1u))
        storeReleaseSys(p.signal, cv[i]);
      else if (p.signal != nullptr)
        storeRelaxedSys(p.signal, cv[i]);
      if (p.counter != nullptr && p.advance != 0) *p.counter = cv[i] - p.number + p.advance;
    }
  }
  __syncthreads();
}

__device__ void syncPush(const SyncSources& y, const StepNumbers* numbers,
                         PushStamps* marks = nullptr) {
  syncCopies(y, y.push, y.pushes, y.push_slotted, true,
             numbers != nullptr ? numbers->push : nullptr,
             numbers != nullptr ? numbers->push_seen : nullptr, marks);
}

// Device::messageStep: the pushes, then the pulls, one block (of
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

// Device::messageStep of pushes only, over a grid (launchGridMessageStep):
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

// std::min and std::max, argument for argument (which of two equal or
// unordered values they return matters for -0 and NaN).
template <class T>
__device__ __forceinline__ T minOf(T a, T b) {
  return b < a ? b : a;
}
template <class T>
__device__ __forceinline__ T maxOf(T a, T b) {
  return a < b ? b : a;
}

__device__ __forceinline__ float addRn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double addRn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mulRn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float divRn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double divRn(double a, double b) { return __ddiv_rn(a, b); }

// Per dtype, common/reductions.cc's arithmetic on the stored type S:
// combine<Op>(in, acc) is the new acc (combineInto's acc = in op acc, in
// that argument order), divide(x, n) avg's division.
template <class T>
struct FloatArith {  // float, double
  using S = T;
  template <ReduceOp Op>
  __device__ static S combine(S in, S acc) {
    if constexpr (Op == ReduceOp::Prod) return mulRn(in, acc);
    else if constexpr (Op == ReduceOp::Min) return minOf(in, acc);
    else if constexpr (Op == ReduceOp::Max) return maxOf(in, acc);
    else return addRn(in, acc);  // sum, avg
  }
  __device__ static S divide(S x, int n) { return divRn(x, static_cast<S>(n)); }
};

// float16 and bfloat16, stored as their bits: each step in float, rounded
// back to nearest even.
struct HalfBits {
  __device__ static float toFloat(unsigned short b) { return __half2float(__ushort_as_half(b)); }
  __device__ static unsigned short fromFloat(float f) {
    return __half_as_ushort(__float2half_rn(f));
  }
};
struct BFloat16Bits {
  __device__ static float toFloat(unsigned short b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
  __device__ static unsigned short fromFloat(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};
template <class Bits>
struct SixteenArith {
  using S = unsigned short;
  template <ReduceOp Op>
  __device__ static S combine(S in, S acc) {
    return Bits::fromFloat(
        FloatArith<float>::combine<Op>(Bits::toFloat(in), Bits::toFloat(acc)));
  }
  __device__ static S divide(S x, int n) {
    return Bits::fromFloat(__fdiv_rn(Bits::toFloat(x), static_cast<float>(n)));
  }
};

template <class T>
struct IntArith {  // wrapping, through the unsigned type
  using S = T;
  using U = std::make_unsigned_t<T>;
  template <ReduceOp Op>
  __device__ static S combine(S in, S acc) {
    if constexpr (Op == ReduceOp::Prod)
      return static_cast<S>(static_cast<U>(static_cast<U>(in) * static_cast<U>(acc)));
    else if constexpr (Op == ReduceOp::Min) return minOf(in, acc);
    else if constexpr (Op == ReduceOp::Max) return maxOf(in, acc);
    else return static_cast<S>(static_cast<U>(static_cast<U>(in) + static_cast<U>(acc)));
  }
  __device__ static S divide(S x, int n) { return static_cast<S>(x / static_cast<S>(n)); }
};

// Element k of the result. The loop over sources is unrolled to the
// constant bound, so that every source pointer is a fixed parameter (no
// local copy of the parameter block).
template <class A, ReduceOp Op>
__device__ __forceinline__ typename A::S reduceElement(const ReduceSources& srcs, int n,
                                                        std::size_t k) {
  using S = typename A::S;
  S acc = static_cast<const S*>(srcs.p[0])[k];
#pragma unroll
  for (int j = 1; j < static_cast<int>(kMaxReduceSources); ++j)
    if (j < n) acc = A::template combine<Op>(static_cast<const S*>(srcs.p[j])[k], acc);
  if constexpr (Op == ReduceOp::Avg) acc = A::divide(acc, n);
  return acc;
}

// A unit of reduceLines: max(4, sizeof(S)) bytes, whole lines and whole
// elements.
template <class S>
union LineUnit {
  static constexpr int kElems = sizeof(S) < 4 ? 4 / sizeof(S) : 1;
  static constexpr int kWords = sizeof(S) < 4 ? 1 : sizeof(S) / 4;
  uint32_t w[kWords];
  S e[kElems];
};

// A thread's batch of units base, base + step, ... (kLineBatch of them,
// those below `units`) of one source: in lines, their words once every line
// holds `flag` (all loads issued before any is looked at); else the
// elements below `count`.
template <class S>
__device__ __forceinline__ void loadUnits(LineUnit<S> (&x)[kLineBatch], const void* p, bool lines,
                                          uint32_t flag, std::size_t base, std::size_t step,
                                          std::size_t units, std::size_t count,
                                          const uint32_t* release) {
  using Unit = LineUnit<S>;
  if (lines) {
    constexpr int kN = kLineBatch * Unit::kWords;
    std::size_t line[kN];
    uint32_t word[kN];
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b)
#pragma unroll
      for (int i = 0; i < Unit::kWords; ++i)
        line[b * Unit::kWords + i] = (base + b * step) * Unit::kWords + i;
    loadFlaggedLines(word, static_cast<const char*>(p), line, units * Unit::kWords, flag,
                     release);
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b)
#pragma unroll
      for (int i = 0; i < Unit::kWords; ++i)
        if (base + b * step < units) x[b].w[i] = word[b * Unit::kWords + i];
  } else {
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b)
#pragma unroll
      for (int e = 0; e < Unit::kElems; ++e) {
        const std::size_t k = (base + b * step) * Unit::kElems + e;
        if (base + b * step < units && k < count) x[b].e[e] = static_cast<const S*>(p)[k];
      }
  }
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
// fetched once. Unrolled to kMaxReduceSources, a kernel jumped over 14
// copies of it at 2 sources, and spent over a microsecond there (one H100).
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

// 16 bytes of elements of type S.
template <class S>
union VecOf {
  uint4 bits;
  S e[16 / sizeof(S)];
};

// Vectors per thread and source that reduceFusedKernel loads before it
// combines (8: 32 KiB per source at 256 threads).
constexpr int kReduceBatch = 8;

// x[b] = p[base + b * step] for the b whose index is below `vectors`, all
// loads issued before any is used.
template <class V>
__device__ __forceinline__ void loadVectors(V (&x)[kReduceBatch], const void* p,
                                            std::size_t base, std::size_t step,
                                            std::size_t vectors) {
#pragma unroll
  for (int b = 0; b < kReduceBatch; ++b)
    if (base + b * step < vectors) x[b].bits = static_cast<const uint4*>(p)[base + b * step];
}

// srcs.p[j], picked by selects: indexing the sources with a variable would
// copy them to the stack.
__device__ __forceinline__ const void* pick(const ReduceSources& srcs, int j) {
  const void* p = nullptr;
#pragma unroll
  for (int i = 0; i < static_cast<int>(kMaxReduceSources); ++i)
    if (i == j) p = srcs.p[i];
  return p;
}

// The grid's reduction (its waits and signals, if any, are kernels of their
// own around it). wide: dst and every source are 16-byte aligned; each
// thread then takes 16 bytes of every source per step (usually once) and
// combines them element by element, and the last count % (16 / sizeof(S))
// elements go one by one. Each element is read from every source before it
// is written: dst may be a source. The sources are placed once and
// unrolled (one H100, 2 ranks: with the fused kernel's batches in this
// kernel, 93 registers, the 256 KiB and 1 MiB allreduces were 0.3 - 0.4 us
// slower; placing each source where it is used, at 32 registers, 1 MiB was
// 0.4 us slower; 64 MiB took 128 us in all three).
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

// The elements [first, count) in steps of `stride` (a block's threads, or
// a grid's) of dst = the reduction of the sources. wide as in reduceKernel,
// but kReduceBatch vectors per thread and source are loaded before any is
// combined; the loop over sources is not unrolled, and each source's
// pointer is picked once per batch.
template <class A, ReduceOp Op>
__device__ __forceinline__ void reduceInBatches(typename A::S* dst, const ReduceSources& srcs,
                                                int n, std::size_t count, bool wide,
                                                std::size_t first, std::size_t stride) {
  using S = typename A::S;
  constexpr int kPer = 16 / sizeof(S);
  using Vec = VecOf<S>;
  std::size_t scalar_from = 0;
  if (wide) {
    const std::size_t vectors = count / kPer;
    for (std::size_t base = first; base < vectors; base += stride * kReduceBatch) {
      Vec acc[kReduceBatch], in[kReduceBatch];
      loadVectors(acc, srcs.p[0], base, stride, vectors);
#pragma unroll 1
      for (int j = 1; j < n; ++j) {
        loadVectors(in, pick(srcs, j), base, stride, vectors);
#pragma unroll
        for (int b = 0; b < kReduceBatch; ++b)
#pragma unroll
          for (int e = 0; e < kPer; ++e)
            acc[b].e[e] = A::template combine<Op>(in[b].e[e], acc[b].e[e]);
      }
#pragma unroll
      for (int b = 0; b < kReduceBatch; ++b) {
        if (base + b * stride >= vectors) continue;
        if constexpr (Op == ReduceOp::Avg) {
#pragma unroll
          for (int e = 0; e < kPer; ++e) acc[b].e[e] = A::divide(acc[b].e[e], n);
        }
        reinterpret_cast<uint4*>(dst)[base + b * stride] = acc[b].bits;
      }
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
// vector (one H100: 64 KiB 11.1 -> 7.4 us per allreduce).
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

// A MessageStep's pushes and pulls, and what they share, and the kernel
// stamps' sink (null when off) into the kernel's arguments.
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

// A step with parts in rings has a power of two of slots.
bool ringsValid(const MessageStep& step, const SyncSources& y) {
  return (y.push_slotted == 0 && y.pull_slotted == 0) ||
         (step.slots != 0 && (step.slots & (step.slots - 1)) == 0);
}

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

cudaError_t launchSpin(cudaStream_t stream, uint64_t nanoseconds) {
  void* args[] = {&nanoseconds};
  return launchKernel(reinterpret_cast<const void*>(&spinKernel), dim3(1), dim3(1), args,
                      stream);
}

void setProgrammaticLaunch(bool on) { programmatic.store(on, std::memory_order_relaxed); }
void setSpreadSources(bool on) { spreadSources.store(on, std::memory_order_relaxed); }
void setPushesAtOnce(bool on) { pushesAtOnce.store(on, std::memory_order_relaxed); }

// Every (dtype, op) instantiation of every kernel above (every value of
// types.h's tables), through the launch functions with placeholder
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
