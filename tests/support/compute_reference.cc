#include "support/compute_reference.h"

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "common/elements.h"

namespace hir::test {

// ------------------------------------------------------------------ matmul

std::string describe(DType t, const MatmulCase& c) {
  return fmt::format("{} m={} n={} k={} ta={} tb={} acc={} pad={}", toString(t), c.m, c.n, c.k,
                     c.transpose_a, c.transpose_b, c.accumulate, c.pad);
}

std::vector<MatmulCase> matmulCases() {
  std::vector<MatmulCase> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        cases.push_back({5, 3, 7, ta, tb, acc, 0});
        cases.push_back({5, 3, 7, ta, tb, acc, 2});
        cases.push_back({1, 1, 1, ta, tb, acc, 0});
        cases.push_back({17, 33, 65, ta, tb, acc, 3});
      }
  return cases;
}

MatmulData makeMatmulData(DType t, const MatmulCase& c, uint32_t seed) {
  MatmulData d;
  MatmulArgs& x = d.args;
  x.dtype = t;
  x.m = c.m, x.n = c.n, x.k = c.k;
  x.transpose_a = c.transpose_a, x.transpose_b = c.transpose_b, x.accumulate = c.accumulate;
  const int64_t a_rows = c.transpose_a ? c.k : c.m, a_cols = c.transpose_a ? c.m : c.k;
  const int64_t b_rows = c.transpose_b ? c.n : c.k, b_cols = c.transpose_b ? c.k : c.n;
  x.lda = a_cols + c.pad, x.ldb = b_cols + c.pad, x.ldo = c.n + c.pad;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto image = [&](int64_t rows, int64_t cols, int64_t ld, bool values) {
    std::vector<std::byte> out(static_cast<std::size_t>(rows * ld) * dtypeSize(t));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < ld; ++col)
        storeElement(out.data(), t, static_cast<std::size_t>(r * ld + col),
                     PatternElement{0, col < cols && values ? uniform(rng) : nan});
    return out;
  };
  d.a = image(a_rows, a_cols, x.lda, true);
  d.b = image(b_rows, b_cols, x.ldb, true);
  d.out = image(c.m, c.n, x.ldo, c.accumulate);
  return d;
}

std::string compareWithReference(const MatmulData& d, const std::vector<std::byte>& got,
                                 ProductRounding rounding) {
  const MatmulArgs& x = d.args;
  const double u = x.dtype == DType::Float32 ? 0x1p-24 : x.dtype == DType::Float16 ? 0x1p-11
                                                                                     : 0x1p-8;
  const double accumulation = 4.0 * static_cast<double>(x.k + 2) * 0x1p-24;
  const bool product_rounded_first =
      x.accumulate && rounding == ProductRounding::MayRoundProductFirst;
  auto elem = [&](const std::vector<std::byte>& img, int64_t ld, int64_t r, int64_t c) {
    return loadAsDouble(img.data(), x.dtype, static_cast<std::size_t>(r * ld + c));
  };
  for (int64_t i = 0; i < x.m; ++i) {
    for (int64_t j = 0; j < x.ldo; ++j) {
      const double value = elem(got, x.ldo, i, j);
      if (j >= x.n) {  // padding: still NaN
        if (!std::isnan(value)) return fmt::format("padding out[{}][{}] became {}", i, j, value);
        continue;
      }
      const double before = x.accumulate ? elem(d.out, x.ldo, i, j) : 0.0;
      double product = 0.0;
      double magnitude = std::abs(before);
      for (int64_t p = 0; p < x.k; ++p) {
        const double av = x.transpose_a ? elem(d.a, x.lda, p, i) : elem(d.a, x.lda, i, p);
        const double bv = x.transpose_b ? elem(d.b, x.ldb, j, p) : elem(d.b, x.ldb, p, j);
        product += av * bv;
        magnitude += std::abs(av * bv);
      }
      const double ref = before + product;
      const double tolerance = u * std::abs(ref) +
                               (product_rounded_first ? u * std::abs(product) : 0.0) +
                               accumulation * magnitude;
      if (!(std::abs(value - ref) <= tolerance))
        return fmt::format("out[{}][{}] is {}, the double reference {} (tolerance {})", i, j,
                           value, ref, tolerance);
    }
  }
  return "";
}

// --------------------------------------------------------------------- add

AddData makeAddData(DType t, std::size_t count, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1000.0, 1000.0);
  AddData d;
  for (auto* v : {&d.a, &d.b, &d.sum}) v->resize(count * dtypeSize(t));
  for (std::size_t k = 0; k < count; ++k) {
    if (isFloating(t)) {
      storeElement(d.a.data(), t, k, PatternElement{0, uniform(rng)});
      storeElement(d.b.data(), t, k, PatternElement{0, uniform(rng)});
      const double sum = loadAsDouble(d.a.data(), t, k) + loadAsDouble(d.b.data(), t, k);
      storeElement(d.sum.data(), t, k, PatternElement{0, sum});
    } else {
      storeElement(d.a.data(), t, k, PatternElement{static_cast<int64_t>(rng()), 0});
      storeElement(d.b.data(), t, k, PatternElement{static_cast<int64_t>(rng()), 0});
      const uint64_t sum = static_cast<uint64_t>(loadAsInt(d.a.data(), t, k)) +
                           static_cast<uint64_t>(loadAsInt(d.b.data(), t, k));
      storeElement(d.sum.data(), t, k, PatternElement{static_cast<int64_t>(sum), 0});
    }
  }
  return d;
}

}  // namespace hir::test
