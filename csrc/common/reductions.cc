// The arithmetic of reductions on the host (reductions.h).
#include "common/reductions.h"

#include <algorithm>
#include <type_traits>

#include "common/check.h"
#include "common/elements.h"

namespace hir {

namespace {

// Integers: the dtype's arithmetic, wrapping (through the unsigned type, so
// that signed overflow is defined), as MPI's built-in ops compute.
template <class T>
struct IntOps {
  using U = std::make_unsigned_t<T>;
  static T add(T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); }
  static T mul(T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); }
};

template <class T, class F>
void combineNative(void* acc, const void* in, std::size_t n, F f) {
  auto* x = static_cast<T*>(acc);
  const auto* y = static_cast<const T*>(in);
  for (std::size_t i = 0; i < n; ++i) x[i] = f(y[i], x[i]);
}

template <class T>
void combineInteger(void* acc, const void* in, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return combineNative<T>(acc, in, n, IntOps<T>::add);
    case ReduceOp::Prod: return combineNative<T>(acc, in, n, IntOps<T>::mul);
    case ReduceOp::Min: return combineNative<T>(acc, in, n, [](T a, T b) { return std::min(a, b); });
    case ReduceOp::Max: return combineNative<T>(acc, in, n, [](T a, T b) { return std::max(a, b); });
  }
  HIR_INTERNAL_ASSERT(false, "unknown reduce op {}", static_cast<int>(op));
}

template <class T>
void combineFloating(void* acc, const void* in, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return combineNative<T>(acc, in, n, [](T a, T b) { return a + b; });
    case ReduceOp::Prod: return combineNative<T>(acc, in, n, [](T a, T b) { return a * b; });
    case ReduceOp::Min: return combineNative<T>(acc, in, n, [](T a, T b) { return std::min(a, b); });
    case ReduceOp::Max: return combineNative<T>(acc, in, n, [](T a, T b) { return std::max(a, b); });
  }
  HIR_INTERNAL_ASSERT(false, "unknown reduce op {}", static_cast<int>(op));
}

// float16 / bfloat16: each step in float, rounded back (the mpi backend's
// user-defined MPI ops).
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void combine16(void* acc, const void* in, std::size_t n, ReduceOp op) {
  auto step = [&](auto f) {
    combineNative<uint16_t>(acc, in, n, [&](uint16_t a, uint16_t b) {
      return FromFloat(f(ToFloat(a), ToFloat(b)));
    });
  };
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return step([](float a, float b) { return a + b; });
    case ReduceOp::Prod: return step([](float a, float b) { return a * b; });
    case ReduceOp::Min: return step([](float a, float b) { return std::min(a, b); });
    case ReduceOp::Max: return step([](float a, float b) { return std::max(a, b); });
  }
  HIR_INTERNAL_ASSERT(false, "unknown reduce op {}", static_cast<int>(op));
}

}  // namespace

void combineInto(void* acc, const void* in, std::size_t n, DType t, ReduceOp op) {
  switch (t) {
    case DType::Float32: return combineFloating<float>(acc, in, n, op);
    case DType::Float64: return combineFloating<double>(acc, in, n, op);
    case DType::Float16: return combine16<halfToFloat, floatToHalf>(acc, in, n, op);
    case DType::BFloat16: return combine16<bfloat16ToFloat, floatToBFloat16>(acc, in, n, op);
    case DType::Int32: return combineInteger<int32_t>(acc, in, n, op);
    case DType::Int64: return combineInteger<int64_t>(acc, in, n, op);
    case DType::UInt8: return combineInteger<uint8_t>(acc, in, n, op);
  }
  HIR_INTERNAL_ASSERT(false, "unknown dtype {}", static_cast<int>(t));
}

namespace {

template <class T>
void divideNative(void* data, std::size_t n, int divisor) {
  auto* x = static_cast<T*>(data);
  // A power of two: x * (1 / d) is x / d exactly (both round the same real
  // number), and a multiplication is several times cheaper than a division.
  if constexpr (std::is_floating_point_v<T>) {
    if (divisor > 0 && (divisor & (divisor - 1)) == 0) {
      const T inverse = T(1) / static_cast<T>(divisor);
      for (std::size_t i = 0; i < n; ++i) x[i] *= inverse;
      return;
    }
  }
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] / static_cast<T>(divisor));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void divide16(void* data, std::size_t n, int divisor) {
  auto* x = static_cast<uint16_t*>(data);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = FromFloat(ToFloat(x[i]) / static_cast<float>(divisor));
}

}  // namespace

void divideBy(void* data, DType t, std::size_t n, int divisor) {
  switch (t) {
    case DType::Float32: return divideNative<float>(data, n, divisor);
    case DType::Float64: return divideNative<double>(data, n, divisor);
    case DType::Float16: return divide16<halfToFloat, floatToHalf>(data, n, divisor);
    case DType::BFloat16: return divide16<bfloat16ToFloat, floatToBFloat16>(data, n, divisor);
    case DType::Int32: return divideNative<int32_t>(data, n, divisor);
    case DType::Int64: return divideNative<int64_t>(data, n, divisor);
    case DType::UInt8: return divideNative<uint8_t>(data, n, divisor);
  }
  HIR_INTERNAL_ASSERT(false, "unknown dtype {}", static_cast<int>(t));
}

}  // namespace hir
