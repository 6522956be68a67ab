// Matmul argument checks and the host device's compute kernels (see
// compute.h). Matmul goes through OpenBLAS's cblas_sgemm: float32 directly,
// the 16-bit floats through float32 copies.
#include "device/compute.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/check.h"
#include "common/unary.h"
#include "common/elements.h"

namespace hir {

namespace {

// The stored shape of a matmul operand: rows x cols, rows `ld` apart.
struct Operand {
  int64_t rows, cols;
};
Operand storedA(const MatmulArgs& x) {
  return x.transpose_a ? Operand{x.k, x.m} : Operand{x.m, x.k};
}
Operand storedB(const MatmulArgs& x) {
  return x.transpose_b ? Operand{x.n, x.k} : Operand{x.k, x.n};
}

bool isMatmulDType(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16;
}

}  // namespace

void checkReduceArgs(void* dst, const void* const* srcs, std::size_t sources, std::size_t count,
                     const MessageStep* sync, std::string_view device) {
  HIR_INTERNAL_ASSERT(sources >= 1 && sources <= kMaxReduceSources,
                      "{} reduce of {} sources (1 to {} allowed)", device, sources,
                      kMaxReduceSources);
  if (sync != nullptr) {
    for (std::size_t j = sources; j < kMaxReduceSources; ++j)
      HIR_INTERNAL_ASSERT(sync->counters[j] == nullptr && sync->waits[j] == nullptr &&
                              sync->signals[j] == nullptr && !sync->slotted[j],
                          "{} reduce of {} sources with a sync part for source {}", device,
                          sources, j);
    HIR_INTERNAL_ASSERT(sync->push_count <= kMaxReduceSources && sync->pull_count == 0,
                        "{} reduce with {} pushes and {} pulls", device, sync->push_count,
                        sync->pull_count);
    const bool ring =
        std::find(sync->slotted.begin(), sync->slotted.end(), true) != sync->slotted.end() ||
        std::any_of(sync->pushes.begin(), sync->pushes.begin() + sync->push_count,
                    [](const MessageStep::Copy& p) { return p.slotted; });
    HIR_INTERNAL_ASSERT(!ring || (sync->slots > 0 && (sync->slots & (sync->slots - 1)) == 0),
                        "{} reduce: a ring of {} slots (a power of two expected)", device,
                        sync->slots);
    for (std::size_t j = 0; j < sources; ++j)
      for (const void* a : {static_cast<const void*>(sync->counters[j]),
                            static_cast<const void*>(sync->waits[j]),
                            static_cast<const void*>(sync->signals[j])})
        HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(a) % alignof(uint32_t) == 0,
                            "{} reduce: misaligned semaphore {} of source {}", device, a, j);
    for (std::size_t k = 0; k < sync->push_count; ++k) {
      const MessageStep::Copy& p = sync->pushes[k];
      HIR_INTERNAL_ASSERT(p.bytes == 0 || (p.dst != nullptr && p.src != nullptr),
                          "{} reduce: push {} of {} bytes with a null buffer", device, k, p.bytes);
      for (const void* a : {static_cast<const void*>(p.counter), static_cast<const void*>(p.wait),
                            static_cast<const void*>(p.signal)})
        HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(a) % alignof(uint32_t) == 0,
                            "{} reduce: misaligned semaphore {} of push {}", device, a, k);
    }
  }
  if (count == 0) return;
  HIR_INTERNAL_ASSERT(dst != nullptr && std::find(srcs, srcs + sources, nullptr) == srcs + sources,
                      "{} reduce of {} elements with a null buffer", device, count);
}

void checkMatmulArgs(const MatmulArgs& x, std::string_view device) {
  HIR_INTERNAL_ASSERT(isMatmulDType(x.dtype), "{} matmul: dtype {} is not float32, float16 or "
                      "bfloat16", device, toString(x.dtype));
  HIR_INTERNAL_ASSERT(x.m >= 0 && x.n >= 0 && x.k >= 0, "{} matmul: negative size m={} n={} k={}",
                      device, x.m, x.n, x.k);
  const Operand a = storedA(x), b = storedB(x);
  HIR_INTERNAL_ASSERT(x.lda >= a.cols && x.ldb >= b.cols && x.ldo >= x.n,
                      "{} matmul: a row stride is shorter than its row: lda={} (a has {} columns), "
                      "ldb={} (b has {}), ldo={} (out has {})",
                      device, x.lda, a.cols, x.ldb, b.cols, x.ldo, x.n);
  const bool empty_out = x.m == 0 || x.n == 0;
  HIR_INTERNAL_ASSERT(empty_out || x.out != nullptr, "{} matmul: out is null", device);
  HIR_INTERNAL_ASSERT(empty_out || x.k == 0 || (x.a != nullptr && x.b != nullptr),
                      "{} matmul: a or b is null", device);
  for (int64_t v : {x.m, x.n, x.k, x.lda, x.ldb, x.ldo})
    HIR_CHECK_AS(BackendError, v <= INT_MAX,
                 "{} matmul: m={} n={} k={} lda={} ldb={} ldo={}: a size above {} is more than "
                 "BLAS takes",
                 device, x.m, x.n, x.k, x.lda, x.ldb, x.ldo, INT_MAX);
}

// ------------------------------------------------------------------ matmul

namespace {

using Widen = float (*)(uint16_t);
using Narrow = uint16_t (*)(float);

// rows x cols of 16-bit elements, rows `ld` apart -> packed float32.
std::vector<float> widen(const void* base, int64_t rows, int64_t cols, int64_t ld, Widen f) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  const auto* p = static_cast<const char*>(base);
  std::vector<uint16_t> row(static_cast<std::size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(row.data(), p + r * ld * 2, static_cast<std::size_t>(cols) * 2);
    float* dst = out.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) dst[c] = f(row[static_cast<std::size_t>(c)]);
  }
  return out;
}

// Packed float32 rows x cols -> 16-bit elements, rows `ld` apart.
void narrow(const std::vector<float>& in, void* base, int64_t rows, int64_t cols, int64_t ld,
            Narrow f) {
  auto* p = static_cast<char*>(base);
  std::vector<uint16_t> row(static_cast<std::size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = in.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[static_cast<std::size_t>(c)] = f(src[c]);
    std::memcpy(p + r * ld * 2, row.data(), static_cast<std::size_t>(cols) * 2);
  }
}

}  // namespace

void hostMatmul(const MatmulArgs& x) {
  if (x.m == 0 || x.n == 0) return;
  const std::size_t el = dtypeSize(x.dtype);
  if (x.k == 0) {  // an empty sum: out = 0, or out unchanged
    if (x.accumulate) return;
    auto* out = static_cast<char*>(x.out);
    for (int64_t r = 0; r < x.m; ++r)
      std::memset(out + r * x.ldo * el, 0, static_cast<std::size_t>(x.n) * el);
    return;
  }
  const auto m = static_cast<int>(x.m), n = static_cast<int>(x.n), k = static_cast<int>(x.k);
  const CBLAS_TRANSPOSE ta = x.transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = x.transpose_b ? CblasTrans : CblasNoTrans;
  const float beta = x.accumulate ? 1.0f : 0.0f;
  if (x.dtype == DType::Float32) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, static_cast<const float*>(x.a),
                static_cast<int>(x.lda), static_cast<const float*>(x.b), static_cast<int>(x.ldb),
                beta, static_cast<float*>(x.out), static_cast<int>(x.ldo));
    return;
  }
  HIR_INTERNAL_ASSERT(x.dtype == DType::Float16 || x.dtype == DType::BFloat16,
                      "host matmul: dtype {}", toString(x.dtype));
  const bool half = x.dtype == DType::Float16;
  const Widen to_float = half ? halfToFloat : bfloat16ToFloat;
  const Narrow from_float = half ? floatToHalf : floatToBFloat16;
  const Operand sa = storedA(x), sb = storedB(x);
  const std::vector<float> a = widen(x.a, sa.rows, sa.cols, x.lda, to_float);
  const std::vector<float> b = widen(x.b, sb.rows, sb.cols, x.ldb, to_float);
  std::vector<float> out = x.accumulate
                               ? widen(x.out, x.m, x.n, x.ldo, to_float)
                               : std::vector<float>(static_cast<std::size_t>(x.m * x.n));
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a.data(), static_cast<int>(sa.cols),
              b.data(), static_cast<int>(sb.cols), beta, out.data(), n);
  narrow(out, x.out, x.m, x.n, x.ldo, from_float);
}

// --------------------------------------------------------------------- add

namespace {

// Elements go through memcpy, as in common/elements.cc: buffers are raw
// bytes, and out may be a or b (each element is read before it is written).
template <class T, class F>
void addAs(void* out, const void* a, const void* b, std::size_t count, F add) {
  auto* o = static_cast<char*>(out);
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  for (std::size_t i = 0; i < count; ++i) {
    T x, y;
    std::memcpy(&x, pa + i * sizeof(T), sizeof(T));
    std::memcpy(&y, pb + i * sizeof(T), sizeof(T));
    const T r = add(x, y);
    std::memcpy(o + i * sizeof(T), &r, sizeof(T));
  }
}

// Adds in the unsigned type of the same width: an overflow wraps (two's
// complement) instead of being undefined.
template <class T>
T wrappingAdd(T x, T y) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
}

}  // namespace

void hostAdd(void* out, const void* a, const void* b, DType t, std::size_t count) {
  if (count == 0) return;
  switch (t) {
    case DType::Float32:
      return addAs<float>(out, a, b, count, [](float x, float y) { return x + y; });
    case DType::Float64:
      return addAs<double>(out, a, b, count, [](double x, double y) { return x + y; });
    // float32 has more than twice the 16-bit floats' precision (24 >= 2*11+2
    // bits), so adding in float32 and rounding once more is exactly rounded.
    case DType::Float16:
      return addAs<uint16_t>(out, a, b, count, [](uint16_t x, uint16_t y) {
        return floatToHalf(halfToFloat(x) + halfToFloat(y));
      });
    case DType::BFloat16:
      return addAs<uint16_t>(out, a, b, count, [](uint16_t x, uint16_t y) {
        return floatToBFloat16(bfloat16ToFloat(x) + bfloat16ToFloat(y));
      });
    case DType::Int32: return addAs<int32_t>(out, a, b, count, wrappingAdd<int32_t>);
    case DType::Int64: return addAs<int64_t>(out, a, b, count, wrappingAdd<int64_t>);
    case DType::UInt8: return addAs<uint8_t>(out, a, b, count, wrappingAdd<uint8_t>);
  }
  HIR_INTERNAL_ASSERT(false, "host add: unknown dtype {}", static_cast<int>(t));
}

// ------------------------------------------------------------------- unary

namespace {

// Element k of a cast: floating to integer saturates, integer to integer
// wraps, anything to floating rounds as the fill pattern does.
PatternElement castElement(const UnaryArgs& x, std::size_t k) {
  if (isFloating(x.out_type)) {
    const double d = isFloating(x.in_type) ? loadAsDouble(x.in, x.in_type, k)
                                           : static_cast<double>(loadAsInt(x.in, x.in_type, k));
    return roundedElement(x.out_type, d);
  }
  const int64_t v =
      isFloating(x.in_type)
          ? saturatingToInt(loadAsDouble(x.in, x.in_type, k), integerMin(x.out_type),
                            integerMax(x.out_type))
          : loadAsInt(x.in, x.in_type, k);
  return {v, 0.0};  // storeElement converts as a C++ cast
}

}  // namespace

void checkRandomPattern(DType t, const RandomPattern& p, std::string_view device) {
  HIR_INTERNAL_ASSERT(p.low < p.high, "{} fillRandom: low {} is not below high {}", device, p.low,
                      p.high);
  if (isFloating(t)) return;
  HIR_INTERNAL_ASSERT(p.low >= -0x1p63 && p.high < 0x1p63 && p.low == std::floor(p.low) &&
                          p.high == std::floor(p.high),
                      "{} fillRandom of {}: bounds [{}, {}) are not whole numbers within int64",
                      device, toString(t), p.low, p.high);
}

void hostUnary(const UnaryArgs& x) {
  HIR_INTERNAL_ASSERT(x.op == UnaryOp::Cast ||
                          (x.in_type == x.out_type && isFloating(x.in_type)),
                      "host unary {}: {} to {} (a floating dtype to itself expected)",
                      static_cast<int>(x.op), toString(x.in_type), toString(x.out_type));
  for (std::size_t k = 0; k < x.count; ++k) {
    PatternElement e{};
    if (x.op == UnaryOp::Cast) {
      e = castElement(x, k);
    } else if (x.op == UnaryOp::Scale) {
      e = roundedElement(x.out_type, loadAsDouble(x.in, x.in_type, k) * x.factor);
    } else if (x.in_type == DType::Float64) {
      e.f = activationOf(x.op, loadAsDouble(x.in, x.in_type, k));
    } else {
      const float v = static_cast<float>(loadAsDouble(x.in, x.in_type, k));
      e = roundedElement(x.out_type, activationOf(x.op, v));
    }
    storeElement(x.out, x.out_type, k, e);
  }
}

}  // namespace hir
