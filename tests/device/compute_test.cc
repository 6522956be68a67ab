// The host device's elementwise functions, random fill and checks against a
// tensor (device/compute.cc, device/host_device.cc, common/elements.cc):
// the values the cuda device must match (tests/device/cuda_device_gputest.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "common/elements.h"
#include "common/random.h"
#include "device/compute.h"
#include "device/host_device.h"

namespace hir {
namespace {

constexpr Duration kLong{10000};

std::vector<double> unaryOf(UnaryOp op, DType t, const std::vector<double>& in,
                            double factor = 1.0, DType out_t = DType::Float32) {
  if (op != UnaryOp::Cast) out_t = t;
  std::vector<char> a(in.size() * dtypeSize(t)), b(in.size() * dtypeSize(out_t));
  for (std::size_t k = 0; k < in.size(); ++k)
    storeElement(a.data(), t, k,
                 isFloating(t) ? roundedElement(t, in[k])
                               : PatternElement{static_cast<int64_t>(in[k]), 0});
  UnaryArgs args{op, a.data(), t, b.data(), out_t, in.size(), factor};
  hostUnary(args);
  std::vector<double> out;
  for (std::size_t k = 0; k < in.size(); ++k) out.push_back(loadAsDouble(b.data(), out_t, k));
  return out;
}

TEST(HostCompute, ActivationsMatchTheirFormulas) {
  const std::vector<double> x = {-3.0, -1.0, -0.0, 0.0, 0.5, 1.0, 4.0};
  for (DType t : {DType::Float32, DType::Float64}) {
    const double tol = t == DType::Float64 ? 1e-15 : 1e-6;
    auto relu = unaryOf(UnaryOp::Relu, t, x);
    auto gelu = unaryOf(UnaryOp::Gelu, t, x);
    auto silu = unaryOf(UnaryOp::Silu, t, x);
    for (std::size_t k = 0; k < x.size(); ++k) {
      EXPECT_EQ(relu[k], x[k] < 0 ? 0.0 : x[k]) << toString(t) << " x=" << x[k];
      const double g =
          0.5 * x[k] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[k] + 0.044715 * std::pow(x[k], 3))));
      EXPECT_NEAR(gelu[k], g, tol * (1 + std::fabs(g))) << toString(t) << " x=" << x[k];
      const double s = x[k] / (1 + std::exp(-x[k]));
      EXPECT_NEAR(silu[k], s, tol * (1 + std::fabs(s))) << toString(t) << " x=" << x[k];
    }
  }
  // torch.nn.functional.gelu(torch.tensor(1.0), approximate="tanh") = 0.8411920
  EXPECT_NEAR(unaryOf(UnaryOp::Gelu, DType::Float32, {1.0})[0], 0.841192, 1e-6);
  // Half types compute in float and round once: 1.0 -> gelu -> bfloat16.
  EXPECT_EQ(unaryOf(UnaryOp::Gelu, DType::BFloat16, {1.0})[0], 0.83984375);
  EXPECT_TRUE(std::isnan(unaryOf(UnaryOp::Relu, DType::Float32, {NAN})[0]));
}

TEST(HostCompute, ScaleMultipliesInDoubleAndRoundsOnce) {
  EXPECT_EQ(unaryOf(UnaryOp::Scale, DType::Float32, {3.0}, 1.0 / 3.0)[0],
            static_cast<double>(static_cast<float>(3.0 * (1.0 / 3.0))));
  EXPECT_EQ(unaryOf(UnaryOp::Scale, DType::Float16, {1000.0}, 100.0)[0],
            std::numeric_limits<double>::infinity());  // above float16's 65504
  EXPECT_EQ(unaryOf(UnaryOp::Scale, DType::Float64, {-2.5}, -4.0)[0], 10.0);
}

TEST(HostCompute, CastsSaturateTruncateWrapAndRound) {
  // Floating to integer: toward zero, saturated, NaN to 0.
  EXPECT_EQ(unaryOf(UnaryOp::Cast, DType::Float32, {-1.7, 2.9, 1e20, -1e20, NAN, -0.5}, 1,
                    DType::Int32),
            (std::vector<double>{-1, 2, 2147483647.0, -2147483648.0, 0, 0}));
  EXPECT_EQ(unaryOf(UnaryOp::Cast, DType::Float64, {-3, 300, 255.9}, 1, DType::UInt8),
            (std::vector<double>{0, 255, 255}));
  // Integer to integer wraps as a C++ cast.
  EXPECT_EQ(unaryOf(UnaryOp::Cast, DType::Int32, {-1, 256, 257}, 1, DType::UInt8),
            (std::vector<double>{255, 0, 1}));
  // To floating: rounded to nearest even.
  EXPECT_EQ(unaryOf(UnaryOp::Cast, DType::Int32, {16777217}, 1, DType::Float32)[0], 16777216.0);
  EXPECT_EQ(unaryOf(UnaryOp::Cast, DType::Float32, {257.0}, 1, DType::BFloat16)[0], 256.0);
  EXPECT_EQ(unaryOf(UnaryOp::Cast, DType::Float32, {1e6}, 1, DType::Float16)[0],
            std::numeric_limits<double>::infinity());
}

TEST(HostCompute, ARandomFillIsAFunctionOfSeedAndIndexWithinItsBounds) {
  HostDevice dev;
  constexpr std::size_t kCount = 4096;
  std::vector<float> a(kCount), b(kCount), c(kCount);
  dev.fillRandom(dev.defaultStream(), a.data(), DType::Float32, kCount, {7, -2.0, 3.0});
  dev.fillRandom(dev.defaultStream(), b.data(), DType::Float32, kCount, {7, -2.0, 3.0});
  dev.fillRandom(dev.defaultStream(), c.data(), DType::Float32, kCount, {8, -2.0, 3.0});
  // A part of a span: element k of the reference is bits(seed, k).
  std::vector<float> part(16);
  dev.fillRandom(dev.defaultStream(), part.data(), DType::Float32, 16, {7, -2.0, 3.0});
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), a.begin()));
  double sum = 0;
  for (float v : a) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LE(v, 3.0f);  // rounding to float may reach high
    sum += v;
  }
  EXPECT_NEAR(sum / kCount, 0.5, 0.1);  // uniform: the mean is (low + high) / 2
  // The value itself, as common/random.h defines it.
  EXPECT_EQ(a[5], static_cast<float>(randomReal(7, 5, -2.0, 3.0)));
}

TEST(HostCompute, ARandomFillOfIntegersCoversItsRangeIncludingSpansAboveTwoToThe32) {
  HostDevice dev;
  constexpr std::size_t kCount = 2000;
  std::vector<int32_t> small(kCount);
  std::vector<int64_t> wide(kCount);
  dev.fillRandom(dev.defaultStream(), small.data(), DType::Int32, kCount, {1, -3.0, 4.0});
  dev.fillRandom(dev.defaultStream(), wide.data(), DType::Int64, kCount, {1, -0x1p40, 0x1p40});
  dev.synchronize(dev.defaultStream(), kLong);
  std::set<int32_t> seen(small.begin(), small.end());
  EXPECT_EQ(seen, (std::set<int32_t>{-3, -2, -1, 0, 1, 2, 3}));
  int64_t most = 0;
  for (int64_t v : wide) {
    ASSERT_GE(v, -(int64_t{1} << 40));
    ASSERT_LT(v, int64_t{1} << 40);
    most = std::max(most, v);
  }
  EXPECT_GT(most, int64_t{1} << 38);  // not confined to 32 bits
}

TEST(HostCompute, ACheckAgainstATensorUsesAtolPlusRtolTimesTheExpectedValue) {
  HostDevice dev;
  std::vector<float> got = {1.0f, 100.5f, 0.0f, NAN, 7.0f};
  std::vector<double> expected = {1.0, 100.0, 1e-3, NAN, -7.0};
  CheckRecord* rec = dev.allocateCheckRecords(2);
  // |100.5 - 100| = 0.5 <= 0.01 * 100; 1e-3 within atol 2e-3; NaN never
  // matches; -7 is far.
  dev.checkAgainst(dev.defaultStream(), got.data(), DType::Float32, expected.data(),
                   DType::Float64, got.size(), Tolerance(2e-3, 0.01), &rec[0], 0);
  dev.checkAgainst(dev.defaultStream(), got.data(), DType::Float32, expected.data(),
                   DType::Float64, got.size(), Tolerance(0, 0.001), &rec[1], 0);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(rec[0].checked, 5u);
  EXPECT_EQ(rec[0].mismatches, 2u);
  EXPECT_EQ(rec[0].index[0], 3);
  EXPECT_EQ(rec[0].index[1], 4);
  EXPECT_EQ(rec[0].expected[1].f, -7.0);
  EXPECT_EQ(rec[1].mismatches, 4u);  // 100.5 and 0 vs 1e-3 fail too
  dev.freeCheckRecords(rec);
}

TEST(HostCompute, ACheckOfIntegersAgainstIntegersIsExactBeyondTwoToThe53) {
  HostDevice dev;
  std::vector<int64_t> got = {(int64_t{1} << 53) + 1};
  std::vector<int64_t> expected = {int64_t{1} << 53};
  CheckRecord* rec = dev.allocateCheckRecords(1);
  dev.checkAgainst(dev.defaultStream(), got.data(), DType::Int64, expected.data(), DType::Int64, 1,
                   0, rec, 0);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(rec->mismatches, 1u);
  EXPECT_EQ(rec->integer, 1);
  EXPECT_EQ(rec->got[0].i, (int64_t{1} << 53) + 1);
  dev.freeCheckRecords(rec);
}

}  // namespace
}  // namespace hir
