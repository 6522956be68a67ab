// Element-level helpers shared by the host device, the MPI backend's
// reductions and the tests: float16/bfloat16 conversions (round to nearest
// even), the fill/check pattern, and typed load/store.
#pragma once

#include <cstddef>
#include <cstdint>

#include <hostir/device.h>
#include <hostir/types.h>

namespace hir {

uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBFloat16(float f);
float bfloat16ToFloat(uint16_t h);

// The fill/check pattern: element k of a tensor filled with (value, step) is
// value + step * k, computed in int64 for integer dtypes (then converted as a
// C++ cast would) and in double for floating dtypes (then rounded to dtype).
// PatternElement carries both forms so integer checks stay exact.
struct PatternElement {
  int64_t i;  // exact value for integer dtypes
  double f;   // value rounded to the dtype, for floating dtypes
};
PatternElement patternElement(DType t, int64_t value, int64_t step, int64_t k);

// Stores a pattern element (already rounded) at index `k` of `base`.
void storeElement(void* base, DType t, std::size_t k, const PatternElement& e);
// Loads element `k` of `base` as double (integers converted).
double loadAsDouble(const void* base, DType t, std::size_t k);
// Loads element `k` of `base` as int64 (integer dtypes only).
int64_t loadAsInt(const void* base, DType t, std::size_t k);

// `d` rounded to the floating dtype `t` as the pattern rounds (double to
// float, float to half or bfloat16), as a PatternElement.
PatternElement roundedElement(DType t, double d);

// Element k of the random pattern (common/random.h) for dtype `t`.
PatternElement randomElement(DType t, const RandomPattern& p, uint64_t k);

// |got - expected| <= atol + rtol * |expected|; NaN never matches, equal
// infinities do. The integer form computes the difference without overflow.
bool closeEnough(double got, double expected, const Tolerance& tol);
bool closeEnough(int64_t got, int64_t expected, const Tolerance& tol);

// Does element `k` of `base` match `expected` within `tolerance`?
// `integer`: as int64 (expected.i; `t` an integer dtype), else as double
// (expected.f; an integer `t` converted). Integers compare exactly when the
// tolerance is 0; NaN never matches. Without `integer`: as `t` is.
bool elementMatches(const void* base, DType t, std::size_t k, const PatternElement& expected,
                    const Tolerance& tolerance, bool integer);
bool elementMatches(const void* base, DType t, std::size_t k, const PatternElement& expected,
                    const Tolerance& tolerance);

// Fills [0, count) of `base` with the pattern; checks [0, count) against it.
void fillPattern(void* base, DType t, std::size_t count, int64_t value, int64_t step);

}  // namespace hir
