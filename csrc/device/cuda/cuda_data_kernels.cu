// The CUDA device's data kernels: fill and check with the pattern of
// common/elements.h (element k = value + step * k), the elementwise add of
// the compute part, and a spin kernel.
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

#include <type_traits>

#include "device/cuda/cuda_check.cuh"
#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"

#include <hostir/device.h>

namespace hir::cuda {

namespace {

__device__ __forceinline__ int64_t exactPattern(int64_t value, int64_t step, int64_t k) {
  return static_cast<int64_t>(static_cast<uint64_t>(value) +
                              static_cast<uint64_t>(step) * static_cast<uint64_t>(k));
}

__device__ __forceinline__ double doublePattern(int64_t value, int64_t step, int64_t k) {
  return __dadd_rn(static_cast<double>(value),
                   __dmul_rn(static_cast<double>(step), static_cast<double>(k)));
}

// Per element type: make(value, step, k) gives the stored element; matches()
// compares like elementMatches() (within atol + rtol * |expected|) and gives
// got/expected as CheckValues (integers exactly).
template <class T>
struct IntElem {
  __device__ static T make(int64_t value, int64_t step, int64_t k) {
    return static_cast<T>(exactPattern(value, step, k));
  }
  __device__ static bool matches(T raw, int64_t value, int64_t step, int64_t k, double atol,
                                 double rtol, CheckValue* got_out, CheckValue* expected_out) {
    int64_t got = static_cast<int64_t>(raw);
    int64_t expected = static_cast<int64_t>(make(value, step, k));
    got_out->i = got;
    expected_out->i = expected;
    return closeEnoughInt(got, expected, atol, rtol);
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
  __device__ static bool matches(T raw, int64_t value, int64_t step, int64_t k, double atol,
                                 double rtol, CheckValue* got_out, CheckValue* expected_out) {
    double got = Convert<T>::toDouble(raw);
    double expected = Convert<T>::toDouble(make(value, step, k));
    got_out->f = got;
    expected_out->f = expected;
    return closeEnoughReal(got, expected, atol, rtol);
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

// Checks src against the pattern (cuda_check.cuh counts and reports).
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    checkKernel(const T* src, std::size_t count, int64_t value, int64_t step, double atol,
                double rtol, CheckRecord* rec, int64_t execution) {
  followPrevious();
  using E = std::conditional_t<std::is_integral_v<T>, IntElem<T>, FloatElem<T>>;
  checkElements(count, rec, execution, std::is_integral_v<T>,
                [&](std::size_t k, CheckValue* got, CheckValue* expected) {
                  return E::matches(src[k], value, step, static_cast<int64_t>(k), atol, rtol,
                                    got, expected);
                });
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
                    int64_t step, Tolerance tolerance, CheckRecord* rec, int64_t execution,
                    int max_blocks) {
  const T* typed = static_cast<const T*>(src);
  double atol = tolerance.atol, rtol = tolerance.rtol;
  void* args[] = {&typed, &count, &value, &step, &atol, &rtol, &rec, &execution};
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
                        int64_t value, int64_t step, Tolerance tolerance, CheckRecord* record,
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

cudaError_t launchSpin(cudaStream_t stream, uint64_t nanoseconds) {
  void* args[] = {&nanoseconds};
  return launchKernel(reinterpret_cast<const void*>(&spinKernel), dim3(1), dim3(1), args,
                      stream);
}

}  // namespace hir::cuda
