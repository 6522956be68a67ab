// The reduce kernels' arithmetic and loads (cuda_reduce_kernels.cu): per
// dtype, common/reductions.cc's combine and avg's division on the stored
// type, bit for bit what the host device gives; an element of the result;
// and the loads of the sources, in lines, in vectors and in batches.
//
// Included by cuda_reduce_kernels.cu only; an anonymous namespace, as in
// cuda_kernel_common.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "device/cuda/cuda_message_common.cuh"

#include <hostir/device.h>
#include <hostir/types.h>

namespace hir::cuda {

namespace {

// The sources of one reduce, by value in the kernel's parameters: a captured
// graph holds them, and nothing is allocated or copied before the launch.
struct ReduceSources {
  const void* p[kMaxReduceSources];
};

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

}  // namespace

}  // namespace hir::cuda
