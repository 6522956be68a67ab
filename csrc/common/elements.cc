#include "common/elements.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "common/random.h"

namespace hir {

namespace {

// Rounds `mantissa >> shift` to nearest, ties to even. `shift` is 1..31.
uint32_t shiftRoundEven(uint32_t mantissa, int shift) {
  uint32_t kept = mantissa >> shift;
  uint32_t rest = mantissa & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1))) ++kept;
  return kept;
}

// Typed access through memcpy: buffers are raw bytes, and memcpy is the
// aliasing- and alignment-safe way to read or write one element.
template <class T>
T loadRaw(const void* base, std::size_t k) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + k * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void storeRaw(void* base, std::size_t k, T v) {
  std::memcpy(static_cast<char*>(base) + k * sizeof(T), &v, sizeof(T));
}

// value + step * k with int64 wrap-around (unsigned arithmetic has no UB;
// the conversion back to int64 is modular since C++20).
int64_t wrappingPattern(int64_t value, int64_t step, int64_t k) {
  uint64_t v = static_cast<uint64_t>(value) +
               static_cast<uint64_t>(step) * static_cast<uint64_t>(k);
  return static_cast<int64_t>(v);
}

}  // namespace

uint16_t floatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t exponent = (x >> 23) & 0xffu;
  uint32_t mantissa = x & 0x7fffffu;

  if (exponent == 0xff) {
    if (mantissa == 0) return sign | 0x7c00u;  // infinity
    // NaN: keep the top payload bits, force the quiet bit so it stays a NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | (mantissa >> 13));
  }
  int e = static_cast<int>(exponent) - 127 + 15;  // rebias
  if (e >= 0x1f) return sign | 0x7c00u;           // too large: infinity
  if (e <= 0) {
    // Half subnormal (or zero). Below 2^-25 everything rounds to zero; float
    // subnormals (exponent 0) are far below that too.
    if (e < -10) return sign;
    uint32_t full = mantissa | 0x800000u;  // implicit leading 1
    // value = full * 2^(e - 15 - 23); a half subnormal unit is 2^-24.
    return static_cast<uint16_t>(sign | shiftRoundEven(full, 14 - e));
  }
  // Normal: a carry out of the mantissa bumps the exponent, up to infinity,
  // which is exactly what rounding must do.
  uint32_t bits = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (bits & 1))) ++bits;
  return static_cast<uint16_t>(sign | bits);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t floatToBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) != 0) {
    // NaN: truncating could drop every payload bit and make it infinity.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // Round to nearest even on the low 16 bits; overflow carries into infinity.
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bfloat16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

PatternElement patternElement(DType t, int64_t value, int64_t step, int64_t k) {
  int64_t exact = wrappingPattern(value, step, k);
  switch (t) {
    case DType::Int32: {
      int64_t i = static_cast<int32_t>(exact);  // modular, as static_cast does
      return {i, static_cast<double>(i)};
    }
    case DType::Int64:
      return {exact, static_cast<double>(exact)};
    case DType::UInt8: {
      int64_t i = static_cast<uint8_t>(exact);
      return {i, static_cast<double>(i)};
    }
    case DType::Float32:
    case DType::Float64:
    case DType::Float16:
    case DType::BFloat16:
      break;
  }
  // Floating: computed in double, then rounded to the dtype. `i` keeps the
  // int64 pattern for reference; floating checks use `f` only.
  double d = static_cast<double>(value) + static_cast<double>(step) * static_cast<double>(k);
  switch (t) {
    case DType::Float64: return {exact, d};
    case DType::Float32: return {exact, static_cast<double>(static_cast<float>(d))};
    case DType::Float16:
      return {exact, static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(d))))};
    case DType::BFloat16:
      return {exact,
              static_cast<double>(bfloat16ToFloat(floatToBFloat16(static_cast<float>(d))))};
    default: break;
  }
  HIR_INTERNAL_ASSERT(false, "patternElement: unhandled dtype {}", static_cast<int>(t));
}

void storeElement(void* base, DType t, std::size_t k, const PatternElement& e) {
  switch (t) {
    case DType::Float32: return storeRaw<float>(base, k, static_cast<float>(e.f));
    case DType::Float64: return storeRaw<double>(base, k, e.f);
    case DType::Float16: return storeRaw<uint16_t>(base, k, floatToHalf(static_cast<float>(e.f)));
    case DType::BFloat16:
      return storeRaw<uint16_t>(base, k, floatToBFloat16(static_cast<float>(e.f)));
    case DType::Int32: return storeRaw<int32_t>(base, k, static_cast<int32_t>(e.i));
    case DType::Int64: return storeRaw<int64_t>(base, k, e.i);
    case DType::UInt8: return storeRaw<uint8_t>(base, k, static_cast<uint8_t>(e.i));
  }
  HIR_INTERNAL_ASSERT(false, "storeElement: unhandled dtype {}", static_cast<int>(t));
}

double loadAsDouble(const void* base, DType t, std::size_t k) {
  switch (t) {
    case DType::Float32: return loadRaw<float>(base, k);
    case DType::Float64: return loadRaw<double>(base, k);
    case DType::Float16: return halfToFloat(loadRaw<uint16_t>(base, k));
    case DType::BFloat16: return bfloat16ToFloat(loadRaw<uint16_t>(base, k));
    case DType::Int32: return loadRaw<int32_t>(base, k);
    case DType::Int64: return static_cast<double>(loadRaw<int64_t>(base, k));
    case DType::UInt8: return loadRaw<uint8_t>(base, k);
  }
  HIR_INTERNAL_ASSERT(false, "loadAsDouble: unhandled dtype {}", static_cast<int>(t));
}

int64_t loadAsInt(const void* base, DType t, std::size_t k) {
  switch (t) {
    case DType::Int32: return loadRaw<int32_t>(base, k);
    case DType::Int64: return loadRaw<int64_t>(base, k);
    case DType::UInt8: return loadRaw<uint8_t>(base, k);
    case DType::Float32:
    case DType::Float64:
    case DType::Float16:
    case DType::BFloat16:
      break;
  }
  HIR_INTERNAL_ASSERT(false, "loadAsInt called on floating dtype {}", toString(t));
}

PatternElement roundedElement(DType t, double d) {
  switch (t) {
    case DType::Float64: return {0, d};
    case DType::Float32: return {0, static_cast<double>(static_cast<float>(d))};
    case DType::Float16:
      return {0, static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(d))))};
    case DType::BFloat16:
      return {0, static_cast<double>(bfloat16ToFloat(floatToBFloat16(static_cast<float>(d))))};
    default: break;
  }
  HIR_INTERNAL_ASSERT(false, "roundedElement: dtype {} is not floating", toString(t));
}

PatternElement randomElement(DType t, const RandomPattern& p, uint64_t k) {
  if (isFloating(t)) return roundedElement(t, randomReal(p.seed, k, p.low, p.high));
  const int64_t v = randomInteger(p.seed, k, static_cast<int64_t>(p.low),
                                  static_cast<int64_t>(p.high));
  switch (t) {
    case DType::Int32: return {static_cast<int32_t>(v), 0};
    case DType::UInt8: return {static_cast<uint8_t>(v), 0};
    default: return {v, 0};
  }
}

bool closeEnough(double got, double expected, const Tolerance& tol) {
  if (std::isnan(got) || std::isnan(expected)) return false;
  if (got == expected) return true;  // also equal infinities
  // inf - inf is NaN and fails the comparison, as it should.
  return std::fabs(got - expected) <= tol.atol + tol.rtol * std::fabs(expected);
}

bool closeEnough(int64_t got, int64_t expected, const Tolerance& tol) {
  if (got == expected) return true;
  if (!(tol.atol > 0) && !(tol.rtol > 0)) return false;
  // |got - expected| without signed overflow.
  const uint64_t diff = got > expected
                            ? static_cast<uint64_t>(got) - static_cast<uint64_t>(expected)
                            : static_cast<uint64_t>(expected) - static_cast<uint64_t>(got);
  return static_cast<double>(diff) <=
         tol.atol + tol.rtol * std::fabs(static_cast<double>(expected));
}

bool elementMatches(const void* base, DType t, std::size_t k, const PatternElement& expected,
                    const Tolerance& tolerance, bool integer) {
  if (integer) return closeEnough(loadAsInt(base, t, k), expected.i, tolerance);
  return closeEnough(loadAsDouble(base, t, k), expected.f, tolerance);
}

bool elementMatches(const void* base, DType t, std::size_t k, const PatternElement& expected,
                    const Tolerance& tolerance) {
  return elementMatches(base, t, k, expected, tolerance, !isFloating(t));
}

void fillPattern(void* base, DType t, std::size_t count, int64_t value, int64_t step) {
  for (std::size_t k = 0; k < count; ++k)
    storeElement(base, t, k, patternElement(t, value, step, static_cast<int64_t>(k)));
}

}  // namespace hir
