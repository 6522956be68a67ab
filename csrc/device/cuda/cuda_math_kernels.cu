// The CUDA device's elementwise math kernels: the random fill
// (common/random.h), unary (cast, relu, gelu, silu, scale) and the check
// against a tensor, each bit for bit what the host device gives (gelu and
// silu within a few units in the last place: the GPU's tanhf and expf are
// not the host's).
//
// Every element goes through the host's steps: loaded as double
// (loadAsDouble) or int64 (loadAsInt), computed, and stored as
// roundedElement() and storeElement() round (double to float, float to half
// or bfloat16, to nearest even). A conversion of a NaN keeps what the host's
// conversions keep (x86-64's and AArch64's alike): its sign and the top of
// its payload, made quiet, where the GPU's cvt would give its canonical NaN;
// halfToFloat() alone keeps a signaling NaN signaling. One kernel per
// function, whose dtypes are switched on per element (the same branch for
// the whole grid): the kernels are memory bound.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "common/random.h"
#include "common/unary.h"
#include "device/cuda/cuda_check.cuh"
#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"

#include <hostir/device.h>

namespace hir::cuda {

namespace {

__device__ __forceinline__ bool floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 ||
         t == DType::BFloat16;
}

// ------------------------------------------------- conversions as the host's

// float to double: exact; a NaN is made quiet (cvtss2sd, fcvt).
__device__ __forceinline__ double widen(float f) {
  if (!isnan(f)) return static_cast<double>(f);
  const uint32_t b = __float_as_uint(f);
  return __longlong_as_double(static_cast<long long>(
      (static_cast<uint64_t>(b >> 31) << 63) | 0x7ff8000000000000ull |
      (static_cast<uint64_t>(b & 0x7fffffu) << 29)));
}

// double to float, to nearest even; a NaN keeps the top 22 bits of its
// payload and is made quiet.
__device__ __forceinline__ float narrow(double d) {
  if (!isnan(d)) return __double2float_rn(d);
  const auto b = static_cast<uint64_t>(__double_as_longlong(d));
  return __uint_as_float((static_cast<uint32_t>(b >> 63) << 31) | 0x7fc00000u |
                         static_cast<uint32_t>((b >> 29) & 0x7fffffu));
}

// floatToHalf(): to nearest even; a NaN keeps the top of its payload, quiet.
__device__ __forceinline__ uint16_t halfBits(float f) {
  const uint32_t x = __float_as_uint(f);
  if (isnan(f))
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u | ((x & 0x7fffffu) >> 13));
  return __half_as_ushort(__float2half_rn(f));
}

// halfToFloat(): exact, a NaN's payload moved up as it is.
__device__ __forceinline__ float halfValue(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h));
}

// floatToBFloat16(), the same integer steps: to nearest even on the low 16
// bits (a carry rounds up to infinity); a NaN keeps its top bits, quiet.
__device__ __forceinline__ uint16_t bfloat16Bits(float f) {
  const uint32_t x = __float_as_uint(f);
  if (isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float bfloat16Value(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// ------------------------------------------------------ loads and stores

template <class T>
__device__ __forceinline__ T at(const void* base, std::size_t k) {
  return static_cast<const T*>(base)[k];
}

// loadAsDouble(): element k of `base`, integers converted to nearest.
__device__ double loadDouble(const void* base, DType t, std::size_t k) {
  switch (t) {
    case DType::Float32: return widen(at<float>(base, k));
    case DType::Float64: return at<double>(base, k);
    case DType::Float16: return widen(halfValue(at<uint16_t>(base, k)));
    case DType::BFloat16: return widen(bfloat16Value(at<uint16_t>(base, k)));
    case DType::Int32: return at<int32_t>(base, k);
    case DType::Int64: return __ll2double_rn(at<int64_t>(base, k));
    case DType::UInt8: return at<uint8_t>(base, k);
  }
  return 0.0;
}

// loadAsInt(): element k of an integer dtype.
__device__ int64_t loadInt(const void* base, DType t, std::size_t k) {
  switch (t) {
    case DType::Int32: return at<int32_t>(base, k);
    case DType::Int64: return at<int64_t>(base, k);
    case DType::UInt8: return at<uint8_t>(base, k);
    default: return 0;
  }
}

// storeElement(roundedElement(t, d)) for a floating dtype t: double to
// float, float to half or bfloat16.
__device__ void storeRounded(void* base, DType t, std::size_t k, double d) {
  switch (t) {
    case DType::Float64: static_cast<double*>(base)[k] = d; return;
    case DType::Float32: static_cast<float*>(base)[k] = narrow(d); return;
    case DType::Float16: static_cast<uint16_t*>(base)[k] = halfBits(narrow(d)); return;
    case DType::BFloat16: static_cast<uint16_t*>(base)[k] = bfloat16Bits(narrow(d)); return;
    default: return;
  }
}

// storeElement() of an integer dtype: v converted as a C++ cast.
__device__ void storeInt(void* base, DType t, std::size_t k, int64_t v) {
  switch (t) {
    case DType::Int32: static_cast<int32_t*>(base)[k] = static_cast<int32_t>(v); return;
    case DType::Int64: static_cast<int64_t*>(base)[k] = v; return;
    case DType::UInt8: static_cast<uint8_t*>(base)[k] = static_cast<uint8_t>(v); return;
    default: return;
  }
}

__device__ __forceinline__ std::size_t firstIndex() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t gridThreads() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// ----------------------------------------------------------- random fill

// randomElement(): floating dtypes from randomReal, rounded; integer ones
// from randomInteger over [low, high) (already whole, in int64), cast.
__global__ void __launch_bounds__(kBlockThreads)
    fillRandomKernel(void* dst, DType t, std::size_t count, uint64_t seed, double low,
                     double high, int64_t int_low, int64_t int_high) {
  followPrevious();
  const bool real = floating(t);
  for (std::size_t k = firstIndex(); k < count; k += gridThreads()) {
    if (real)
      storeRounded(dst, t, k, randomReal(seed, k, low, high));
    else
      storeInt(dst, t, k, randomInteger(seed, k, int_low, int_high));
  }
}

// ----------------------------------------------------------------- unary

// UnaryArgs with what the host works out once per launch.
struct UnaryParams {
  const void* in;
  void* out;
  std::size_t count;
  double factor;
  double default_nan;  // the host's inf * 0 (x86-64: negative, AArch64: positive)
  int64_t low, high;   // an integer out_type's range (integerMin/Max)
  UnaryOp op;
  DType in_type, out_type;
};

// A NaN made quiet.
__device__ __forceinline__ double quiet(double nan) {
  return __longlong_as_double(__double_as_longlong(nan) | 0x0008000000000000ll);
}

// x * factor in double as the host multiplies: a NaN operand's payload,
// made quiet (x's if both are NaN), and the host's default NaN for an
// invalid product (inf * 0).
__device__ __forceinline__ double scaled(double x, double factor, double default_nan) {
  const double r = __dmul_rn(x, factor);
  if (!isnan(r)) return r;
  if (isnan(x)) return quiet(x);
  if (isnan(factor)) return quiet(factor);
  return default_nan;
}

// hostUnary()'s element k (castElement() for casts).
__device__ __forceinline__ void unaryElement(const UnaryParams& p, std::size_t k) {
  if (p.op == UnaryOp::Cast) {
    if (floating(p.out_type)) {
      const double d = floating(p.in_type) ? loadDouble(p.in, p.in_type, k)
                                           : __ll2double_rn(loadInt(p.in, p.in_type, k));
      storeRounded(p.out, p.out_type, k, d);
    } else {
      const int64_t v = floating(p.in_type)
                            ? saturatingToInt(loadDouble(p.in, p.in_type, k), p.low, p.high)
                            : loadInt(p.in, p.in_type, k);
      storeInt(p.out, p.out_type, k, v);
    }
    return;
  }
  const double x = loadDouble(p.in, p.in_type, k);
  if (p.op == UnaryOp::Scale)
    storeRounded(p.out, p.out_type, k, scaled(x, p.factor, p.default_nan));
  else if (p.in_type == DType::Float64)
    static_cast<double*>(p.out)[k] = activationOf(p.op, x);
  else
    storeRounded(p.out, p.out_type, k, widen(activationOf(p.op, narrow(x))));
}

// Each thread reads its element before it writes it: out may be in (same
// element size).
__global__ void __launch_bounds__(kBlockThreads) unaryKernel(UnaryParams p) {
  followPrevious();
  for (std::size_t k = firstIndex(); k < p.count; k += gridThreads()) unaryElement(p, k);
}

// ------------------------------------------------ check against a tensor

struct CheckAgainstParams {
  const void* got;
  const void* expected;
  std::size_t count;
  double atol, rtol;
  CheckRecord* rec;
  int64_t execution;
  DType t, et;
};

// HostDevice::checkAgainst(): both as int64 when both dtypes are integer,
// else both as double.
__global__ void __launch_bounds__(kBlockThreads) checkAgainstKernel(CheckAgainstParams p) {
  followPrevious();
  const bool integer = !floating(p.t) && !floating(p.et);
  checkElements(p.count, p.rec, p.execution, integer,
                [&](std::size_t k, CheckValue* got, CheckValue* expected) {
                  if (integer) {
                    got->i = loadInt(p.got, p.t, k);
                    expected->i = loadInt(p.expected, p.et, k);
                    return closeEnoughInt(got->i, expected->i, p.atol, p.rtol);
                  }
                  got->f = loadDouble(p.got, p.t, k);
                  expected->f = loadDouble(p.expected, p.et, k);
                  return closeEnoughReal(got->f, expected->f, p.atol, p.rtol);
                });
}

bool validDType(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Float64:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt8:
      return true;
  }
  return false;
}

// What inf * 0 gives on this host (its default NaN), at run time: a
// constant would be folded by the compiler, not computed by the CPU.
double hostDefaultNaN() {
  volatile double inf = std::numeric_limits<double>::infinity(), zero = 0.0;
  return inf * zero;
}

}  // namespace

cudaError_t launchFillRandom(cudaStream_t stream, void* dst, DType t, std::size_t count,
                             const RandomPattern& pattern, int max_blocks) {
  if (count == 0) return cudaSuccess;
  if (!validDType(t)) return cudaErrorInvalidValue;
  uint64_t seed = pattern.seed;
  double low = pattern.low, high = pattern.high;
  // As randomElement() converts them (integer dtypes only: a floating
  // bound may be out of int64's range).
  int64_t int_low = 0, int_high = 0;
  if (!isFloating(t)) {
    int_low = static_cast<int64_t>(pattern.low);
    int_high = static_cast<int64_t>(pattern.high);
  }
  void* args[] = {&dst, &t, &count, &seed, &low, &high, &int_low, &int_high};
  return launchKernel(reinterpret_cast<const void*>(&fillRandomKernel),
                      dim3(blocksFor(count, max_blocks)), dim3(kBlockThreads), args, stream);
}

cudaError_t launchUnary(cudaStream_t stream, const UnaryArgs& x, int max_blocks) {
  if (x.count == 0) return cudaSuccess;
  if (!validDType(x.in_type) || !validDType(x.out_type)) return cudaErrorInvalidValue;
  if (x.op != UnaryOp::Cast && (x.in_type != x.out_type || !isFloating(x.in_type)))
    return cudaErrorInvalidValue;
  UnaryParams p{x.in,     x.out,   x.count, x.factor, hostDefaultNaN(), integerMin(x.out_type),
                integerMax(x.out_type), x.op, x.in_type, x.out_type};
  void* args[] = {&p};
  return launchKernel(reinterpret_cast<const void*>(&unaryKernel),
                      dim3(blocksFor(x.count, max_blocks)), dim3(kBlockThreads), args, stream);
}

cudaError_t launchCheckAgainst(cudaStream_t stream, const void* got, DType t,
                               const void* expected, DType et, std::size_t count,
                               Tolerance tolerance, CheckRecord* record, int64_t execution,
                               int max_blocks) {
  if (count == 0) return cudaSuccess;
  if (!validDType(t) || !validDType(et)) return cudaErrorInvalidValue;
  CheckAgainstParams p{got,    expected, count, tolerance.atol, tolerance.rtol,
                       record, execution, t,    et};
  void* args[] = {&p};
  return launchKernel(reinterpret_cast<const void*>(&checkAgainstKernel),
                      dim3(blocksFor(count, max_blocks)), dim3(kBlockThreads), args, stream);
}

}  // namespace hir::cuda
