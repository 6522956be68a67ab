#include "common/elements.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/check.h"

namespace hir {
namespace {

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                DType::Int32,   DType::Int64,   DType::UInt8};

// --------------------------------------------------------------- float16

TEST(HalfConversion, KnownValuesHaveKnownBitPatterns) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(-2.5f), 0xC100);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7BFF);  // largest finite half
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
}

TEST(HalfConversion, NanStaysNan) {
  uint16_t h = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(h & 0x7C00, 0x7C00);
  EXPECT_NE(h & 0x03FF, 0);
  // A signalling NaN whose payload sits only in the low bits must not
  // collapse into infinity.
  uint16_t s = floatToHalf(std::bit_cast<float>(0x7F800001u));
  EXPECT_EQ(s & 0x7C00, 0x7C00);
  EXPECT_NE(s & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(halfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(halfToFloat(0xFC01)));
}

TEST(HalfConversion, RoundsTiesToEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: the even one is 1.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 lies halfway between 0x3C01 and 0x3C02: even is 0x3C02.
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above the tie rounds up.
  EXPECT_EQ(floatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  // 2049 is halfway between 2048 and 2050.
  EXPECT_EQ(halfToFloat(floatToHalf(2049.0f)), 2048.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(2051.0f)), 2052.0f);
}

TEST(HalfConversion, OverflowRoundsToInfinityOnlyPastTheLastTie) {
  EXPECT_EQ(floatToHalf(65519.0f), 0x7BFF);  // below the tie: largest finite
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);  // the tie rounds to even: infinity
  EXPECT_EQ(floatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(floatToHalf(-1e10f), 0xFC00);
}

TEST(HalfConversion, SubnormalsRoundToNearestEven) {
  float unit = std::ldexp(1.0f, -24);
  EXPECT_EQ(floatToHalf(unit * 0.5f), 0x0000);   // tie between 0 and 1: 0
  EXPECT_EQ(floatToHalf(unit * 0.75f), 0x0001);  // above the tie
  EXPECT_EQ(floatToHalf(unit * 1.5f), 0x0002);   // tie between 1 and 2: 2
  EXPECT_EQ(floatToHalf(unit * 2.5f), 0x0002);   // tie between 2 and 3: 2
  EXPECT_EQ(floatToHalf(unit * 0.25f), 0x0000);
  EXPECT_EQ(floatToHalf(-unit), 0x8001);
  // The largest subnormal plus half a unit rounds up into the smallest normal.
  EXPECT_EQ(floatToHalf(unit * 1023.5f), 0x0400);
  EXPECT_EQ(halfToFloat(0x0001), unit);
  EXPECT_EQ(halfToFloat(0x03FF), unit * 1023);
  EXPECT_EQ(halfToFloat(0x8001), -unit);
  // Float subnormals are far below half's range.
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(HalfConversion, DecodesKnownBitPatterns) {
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0xC100), -2.5f);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(halfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
  EXPECT_EQ(halfToFloat(0x8000), 0.0f);
}

TEST(HalfConversion, EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    auto h = static_cast<uint16_t>(bits);
    float f = halfToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f)))) << std::hex << bits;
    } else {
      ASSERT_EQ(floatToHalf(f), h) << std::hex << bits;
    }
  }
}

// -------------------------------------------------------------- bfloat16

TEST(BFloat16Conversion, KnownValuesHaveKnownBitPatterns) {
  EXPECT_EQ(floatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(floatToBFloat16(-2.5f), 0xC020);
  EXPECT_EQ(floatToBFloat16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(floatToBFloat16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(bfloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bfloat16ToFloat(0xC020), -2.5f);
  EXPECT_EQ(bfloat16ToFloat(0x0001), std::bit_cast<float>(0x00010000u));  // subnormal
}

TEST(BFloat16Conversion, RoundsTiesToEven) {
  EXPECT_EQ(floatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie: even 1.0
  EXPECT_EQ(floatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie: even 0x3F82
  EXPECT_EQ(floatToBFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  EXPECT_EQ(bfloat16ToFloat(floatToBFloat16(257.0f)), 256.0f);
  // The largest float rounds past bfloat16's largest finite value.
  EXPECT_EQ(floatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(BFloat16Conversion, NanStaysNan) {
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBFloat16(std::nanf("")))));
  // Payload only in the low 16 bits: truncation alone would give infinity.
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBFloat16(std::bit_cast<float>(0x7F800001u)))));
}

TEST(BFloat16Conversion, EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    auto h = static_cast<uint16_t>(bits);
    float f = bfloat16ToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBFloat16(f)))) << std::hex << bits;
    } else {
      ASSERT_EQ(floatToBFloat16(f), h) << std::hex << bits;
    }
  }
}

// --------------------------------------------------------------- pattern

TEST(PatternElement, IntegerDTypesWrapLikeStaticCast) {
  EXPECT_EQ(patternElement(DType::Int32, 2147483647, 1, 1).i, -2147483648LL);
  EXPECT_EQ(patternElement(DType::Int32, 0, -1, 3).i, -3);
  EXPECT_EQ(patternElement(DType::UInt8, 250, 3, 2).i, 0);  // 256 -> 0
  EXPECT_EQ(patternElement(DType::UInt8, -1, 0, 0).i, 255);
  EXPECT_EQ(patternElement(DType::Int64, std::numeric_limits<int64_t>::max(), 1, 1).i,
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(patternElement(DType::Int64, 5, 1000000007, 1000000007).i,
            5 + 1000000007LL * 1000000007LL);
}

TEST(PatternElement, FloatingDTypesRoundToTheDType) {
  EXPECT_EQ(patternElement(DType::Float64, 1, 2, 3).f, 7.0);
  EXPECT_EQ(patternElement(DType::Float32, 16777217, 0, 0).f, 16777216.0);
  EXPECT_EQ(patternElement(DType::Float16, 2049, 0, 0).f, 2048.0);
  EXPECT_EQ(patternElement(DType::Float16, 70000, 0, 0).f,
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(patternElement(DType::BFloat16, 257, 0, 0).f, 256.0);
  EXPECT_EQ(patternElement(DType::Float32, -3, -2, 4).f, -11.0);
}

TEST(FillPattern, EveryDTypeStoresThePatternItChecksAgainst) {
  for (DType t : kAllDTypes) {
    constexpr std::size_t kCount = 300;  // uint8 wraps, float16 rounds past 2048
    std::vector<unsigned char> buf(kCount * dtypeSize(t));
    fillPattern(buf.data(), t, kCount, -7, 13);
    for (std::size_t k = 0; k < kCount; ++k) {
      PatternElement e = patternElement(t, -7, 13, static_cast<int64_t>(k));
      ASSERT_TRUE(elementMatches(buf.data(), t, k, e, 0)) << toString(t) << " k=" << k;
      if (isFloating(t)) {
        EXPECT_EQ(loadAsDouble(buf.data(), t, k), e.f) << toString(t) << " k=" << k;
      } else {
        EXPECT_EQ(loadAsInt(buf.data(), t, k), e.i) << toString(t) << " k=" << k;
      }
    }
  }
}

TEST(FillPattern, StoresExactBytes) {
  std::vector<uint16_t> half(3);
  fillPattern(half.data(), DType::Float16, 3, 1, 1);
  EXPECT_EQ(half, (std::vector<uint16_t>{0x3C00, 0x4000, 0x4200}));
  std::vector<uint8_t> bytes(3);
  fillPattern(bytes.data(), DType::UInt8, 3, 254, 1);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{254, 255, 0}));
}

// --------------------------------------------------------- elementMatches

TEST(ElementMatches, IntegerComparesExactlyWithoutTolerance) {
  int32_t v[1] = {41};
  EXPECT_FALSE(elementMatches(v, DType::Int32, 0, patternElement(DType::Int32, 42, 0, 0), 0));
  EXPECT_TRUE(elementMatches(v, DType::Int32, 0, patternElement(DType::Int32, 42, 0, 0), 1));
  EXPECT_FALSE(elementMatches(v, DType::Int32, 0, patternElement(DType::Int32, 43, 0, 0), 1));
  // Large int64 values that double cannot tell apart still differ.
  int64_t big[1] = {(int64_t{1} << 53) + 1};
  EXPECT_FALSE(
      elementMatches(big, DType::Int64, 0, patternElement(DType::Int64, int64_t{1} << 53, 0, 0), 0));
  // Extreme difference does not overflow.
  int64_t lo[1] = {std::numeric_limits<int64_t>::min()};
  EXPECT_FALSE(elementMatches(
      lo, DType::Int64, 0, patternElement(DType::Int64, std::numeric_limits<int64_t>::max(), 0, 0),
      1e6));
}

TEST(ElementMatches, FloatingUsesAbsoluteTolerance) {
  float v[1] = {1.5f};
  PatternElement one = patternElement(DType::Float32, 1, 0, 0);
  EXPECT_FALSE(elementMatches(v, DType::Float32, 0, one, 0));
  EXPECT_FALSE(elementMatches(v, DType::Float32, 0, one, 0.49));
  EXPECT_TRUE(elementMatches(v, DType::Float32, 0, one, 0.5));
}

TEST(ElementMatches, NanNeverMatches) {
  float v[1] = {std::numeric_limits<float>::quiet_NaN()};
  EXPECT_FALSE(elementMatches(v, DType::Float32, 0, patternElement(DType::Float32, 0, 0, 0), 1e30));
  PatternElement nan{0, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_FALSE(elementMatches(v, DType::Float32, 0, nan, 0));
}

TEST(ElementMatches, EqualInfinitiesMatchOppositeOnesDoNot) {
  uint16_t h[1] = {0x7C00};
  PatternElement inf = patternElement(DType::Float16, 70000, 0, 0);
  PatternElement minus_inf = patternElement(DType::Float16, -70000, 0, 0);
  EXPECT_TRUE(elementMatches(h, DType::Float16, 0, inf, 0));
  EXPECT_FALSE(elementMatches(h, DType::Float16, 0, minus_inf, 1e30));
}

TEST(LoadAsInt, RejectsFloatingDTypes) {
  float v[1] = {1.0f};
  EXPECT_THROW(loadAsInt(v, DType::Float32, 0), InternalError);
}

}  // namespace
}  // namespace hir
