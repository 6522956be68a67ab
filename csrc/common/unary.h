// The elementwise functions of Device::unary, one definition for the host
// device and the cuda device's kernels. Float (and half types, widened to
// float) compute in float, float64 in double; the GPU's tanhf and expf may
// differ from the host's by a few units in the last place.
#pragma once

#include <math.h>

#include <climits>
#include <cstdint>

#include <hostir/types.h>

#include "common/random.h"  // HIR_HOST_DEVICE

namespace hir {

// max(x, 0), NaN kept (as torch.relu).
template <class F>
HIR_HOST_DEVICE inline F reluOf(F x) {
  return x < F(0) ? F(0) : x;
}

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): torch's gelu with
// approximate="tanh".
HIR_HOST_DEVICE inline float geluOf(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}
HIR_HOST_DEVICE inline double geluOf(double x) {
  const double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(inner));
}

// x / (1 + e^-x).
HIR_HOST_DEVICE inline float siluOf(float x) { return x / (1.0f + expf(-x)); }
HIR_HOST_DEVICE inline double siluOf(double x) { return x / (1.0 + exp(-x)); }

// relu, gelu or silu of v by `op` (cast and scale leave v as it is: they
// are not activations).
template <class F>
HIR_HOST_DEVICE inline F activationOf(UnaryOp op, F v) {
  switch (op) {
    case UnaryOp::Relu: return reluOf(v);
    case UnaryOp::Gelu: return geluOf(v);
    case UnaryOp::Silu: return siluOf(v);
    case UnaryOp::Cast:
    case UnaryOp::Scale: break;
  }
  return v;
}

// The range of an integer dtype, [integerMin(t), integerMax(t)], at which a
// cast from a floating dtype saturates (int64's for any other dtype).
HIR_HOST_DEVICE inline int64_t integerMin(DType t) {
  return t == DType::Int32 ? INT32_MIN : t == DType::UInt8 ? 0 : INT64_MIN;
}
HIR_HOST_DEVICE inline int64_t integerMax(DType t) {
  return t == DType::Int32 ? INT32_MAX : t == DType::UInt8 ? 255 : INT64_MAX;
}

// A floating value converted to an integer dtype of range [lo, hi]:
// truncated toward zero, saturated, NaN to 0.
HIR_HOST_DEVICE inline int64_t saturatingToInt(double d, int64_t lo, int64_t hi) {
  if (d != d) return 0;
  if (d <= static_cast<double>(lo)) return lo;
  if (d >= static_cast<double>(hi)) return hi;  // (double)INT64_MAX is 2^63
  return static_cast<int64_t>(d);
}

}  // namespace hir
