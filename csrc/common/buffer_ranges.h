// Byte ranges of buffers: whether two overlap, and where a chunk of one
// starts. For the backends that decide between an operation's in-place form
// and a staged copy of its input (mpi, nccl, ipc), and for the evaluator's
// bind(), which refuses one memory bound to two allocations.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hir {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte. An empty or
// null buffer overlaps nothing.
inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// The address `offset` bytes into `base`.
inline const std::byte* bytesAt(const void* base, std::size_t offset) {
  return static_cast<const std::byte*>(base) + offset;
}
inline std::byte* bytesAt(void* base, std::size_t offset) {
  return static_cast<std::byte*>(base) + offset;
}

}  // namespace hir
