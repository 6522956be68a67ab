// The random fill pattern (fill with "random", Device::fillRandom): element k
// of a span is a function of (seed, k) only, so every rank, the host device
// and the cuda device produce the same bits for the same seed. Compiled for
// the host and, in the cuda device's kernels, for the GPU.
//
// bits(seed, k) = mix(mix(seed) + (k + 1) * golden): splitmix64's finalizer
// (Steele, Lea and Flood) over a Weyl sequence, one 64-bit word per element.
// Floating dtypes: u = (bits >> 11) * 2^-53 in [0, 1), value = low +
// (high - low) * u in double with separately rounded multiply and add (no
// fused multiply-add: the kernels use __dmul_rn and __dadd_rn, the host does
// not contract), then rounded to the dtype as the linear pattern is (double
// to float, float to half or bfloat16). Integer dtypes: low + bits mod
// (high - low) in int64, then converted as a C++ cast does.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HIR_HOST_DEVICE __host__ __device__
#else
#define HIR_HOST_DEVICE
#endif

namespace hir {

HIR_HOST_DEVICE inline uint64_t randomMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

HIR_HOST_DEVICE inline uint64_t randomBits(uint64_t seed, uint64_t k) {
  return randomMix(randomMix(seed) + (k + 1) * 0x9E3779B97F4A7C15ull);
}

// low + (high - low) * u, u in [0, 1) from 53 random bits.
HIR_HOST_DEVICE inline double randomReal(uint64_t seed, uint64_t k, double low, double high) {
  const double u = static_cast<double>(randomBits(seed, k) >> 11) * 0x1.0p-53;
#if defined(__CUDA_ARCH__)
  return __dadd_rn(low, __dmul_rn(__dadd_rn(high, -low), u));
#else
  const double span = high - low;
  const double scaled = span * u;
  return low + scaled;
#endif
}

// low + bits mod (high - low), for whole low < high in int64 (the span may
// exceed int64: it is taken as unsigned).
HIR_HOST_DEVICE inline int64_t randomInteger(uint64_t seed, uint64_t k, int64_t low, int64_t high) {
  const uint64_t span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + randomBits(seed, k) % span);
}

}  // namespace hir
