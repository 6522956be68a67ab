// What the cuda device's check kernels share (the pattern's check in
// cuda_data_kernels.cu, the check against a tensor in cuda_math_kernels.cu):
// the tolerance test of common/elements.h's closeEnough(), and the body of a
// check kernel, which counts and reports what it finds into a CheckRecord.
//
// Included by .cu files only; in an anonymous namespace, as
// cuda_kernel_common.cuh says why.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"

#include <hostir/device.h>

namespace hir::cuda {

namespace {

// |got - expected| <= atol + rtol * |expected| as closeEnough(double, ...)
// computes it: NaN never matches, equal values (infinities too) always do,
// and the bound is a separately rounded multiply and add (no fused
// multiply-add, which the host does not use either).
__device__ __forceinline__ bool closeEnoughReal(double got, double expected, double atol,
                                                double rtol) {
  if (isnan(got) || isnan(expected)) return false;
  if (got == expected) return true;
  return fabs(__dsub_rn(got, expected)) <= __dadd_rn(atol, __dmul_rn(rtol, fabs(expected)));
}

// closeEnough(int64_t, ...): exact when both tolerances are 0, else the
// difference (as an unsigned 64-bit number, no overflow) against the bound.
__device__ __forceinline__ bool closeEnoughInt(int64_t got, int64_t expected, double atol,
                                               double rtol) {
  if (got == expected) return true;
  if (!(atol > 0) && !(rtol > 0)) return false;
  const uint64_t diff = got > expected
                            ? static_cast<uint64_t>(got) - static_cast<uint64_t>(expected)
                            : static_cast<uint64_t>(expected) - static_cast<uint64_t>(got);
  return __ull2double_rn(diff) <=
         __dadd_rn(atol, __dmul_rn(rtol, fabs(__ll2double_rn(expected))));
}

// Tries to record one mismatch of `execution` in `rec`. The first failing
// execution claims rec->first_execution with a 64-bit compare-and-swap; the
// threads of that execution then take report slots one at a time, so that
// `reported` never exceeds kMaxReported. Which mismatches get the slots is
// up to the scheduling: any kMaxReported of that execution, not necessarily
// those with the smallest indices. Returns false once this execution may
// report nothing more (another execution owns the record, or it is full).
__device__ bool tryReport(CheckRecord* rec, int64_t execution, std::size_t k, CheckValue got,
                          CheckValue expected, bool integer) {
  auto* first = reinterpret_cast<unsigned long long*>(&rec->first_execution);
  const unsigned long long none = static_cast<unsigned long long>(-1LL);
  const unsigned long long mine = static_cast<unsigned long long>(execution);
  unsigned long long owner = atomicCAS(first, none, mine);
  if (owner != none && owner != mine) return false;
  rec->integer = integer ? 1 : 0;
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

// The body of a check kernel of kBlockThreads threads per block over
// elements [0, count) (grid-stride): matches(k, &got, &expected) compares
// element k and gives the values it compared (CheckValue::i when `integer`,
// else ::f), which a mismatch reports.
//
// The record lives in mapped host memory, so every access crosses the bus,
// and atomics from many blocks queue there (docs/performance.md, "A
// check's bus atomics"). So block 0 adds `count` to `checked` once (every
// element is checked), each block adds its mismatches with one atomic only
// when it found some, and a block stops trying to report as soon as one of
// its threads learns that reporting is over.
template <class Matches>
__device__ __forceinline__ void checkElements(std::size_t count, CheckRecord* rec,
                                              int64_t execution, bool integer, Matches matches) {
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
    CheckValue got{}, expected{};
    if (matches(k, &got, &expected)) continue;
    ++mismatches;
    if (!reporting_over && !tryReport(rec, execution, k, got, expected, integer))
      reporting_over = 1;
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

}  // namespace

}  // namespace hir::cuda
