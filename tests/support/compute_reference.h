// The host reference that the device tests check compute against
// (tests/device/host_device_test.cc, cuda_device_gputest.cc): matmul cases,
// their operands as host images and a double reference to compare the
// result with, and add's operands with their exactly rounded or wrapped sum.
// One device differs from another only in how it may round a product it
// accumulates onto out (ProductRounding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <hostir/device.h>
#include <hostir/types.h>

namespace hir::test {

// ------------------------------------------------------------------ matmul

// One matmul: out[m, n] (+)= op(a) * op(b), each row `pad` elements longer
// than it needs to be.
struct MatmulCase {
  int64_t m, n, k;
  bool transpose_a, transpose_b, accumulate;
  int64_t pad;
};

// e.g. "float32 m=5 n=3 k=7 ta=false tb=true acc=true pad=2".
std::string describe(DType t, const MatmulCase& c);

inline constexpr DType kMatmulDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16};

// The four transpose combinations, with and without accumulation, on
// non-square shapes, with and without padded rows.
std::vector<MatmulCase> matmulCases();

// The operands of a case as host images: values in [-1, 1] rounded to the
// dtype, NaN in the rows' padding (a matmul that reads it gives NaN), and
// `out` holding random values to accumulate onto, or NaN where it is
// overwritten (out = a * b must not read it). args' pointers are null.
struct MatmulData {
  MatmulArgs args;
  std::vector<std::byte> a, b, out;
};

MatmulData makeMatmulData(DType t, const MatmulCase& c, uint32_t seed);

// How many roundings a device may apply to the product when it accumulates
// (out += a * b).
enum class ProductRounding {
  // One rounding of the whole result out + a * b to the dtype (the host
  // device).
  Once,
  // One more rounding, of the product alone: cuBLAS's epilogue may round
  // a * b to the dtype before it adds out (seen with bfloat16 at 512^3 on an
  // H100: an error of 0.93 ulp).
  MayRoundProductFirst,
};

// Compares `got` (out after the matmul) with the product computed in double
// from the rounded inputs, element by element. The bound: relative to the
// result for its rounding to the dtype (unit roundoff u: 2^-8 for
// bfloat16), plus float32 accumulation over k terms relative to the sum of
// the terms' magnitudes, with room for any summation order and tensor
// cores' truncating adds; under ProductRounding::MayRoundProductFirst and
// when accumulating, u relative to the product alone on top. The padding
// must be untouched. Returns the first problem, or "".
std::string compareWithReference(const MatmulData& d, const std::vector<std::byte>& got,
                                 ProductRounding rounding);

// --------------------------------------------------------------------- add

// Operands of add for every dtype: random values (floating ones in
// [-1000, 1000], rounded), and for integers random bits, so that sums
// overflow; and the expected sum, computed here: floating sums exactly in
// double, then rounded once to the dtype; integers modulo 2^bits.
struct AddData {
  std::vector<std::byte> a, b, sum;
};

AddData makeAddData(DType t, std::size_t count, uint32_t seed);

}  // namespace hir::test
