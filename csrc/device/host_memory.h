// Internal: how much memory this process can still be given, so that the
// host device refuses an allocation that cannot fit with a RuntimeError
// (exit 3) instead of handing out memory that filling it turns into the
// kernel's out-of-memory kill (exit 137, and only mpirun's message): a 4 TB
// memfd maps without complaint, its pages are only taken when touched.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hir {

// "1125899906842624 bytes (1 PiB)": exact, then readable (binary units).
std::string describeBytes(std::size_t bytes);

// One bound on what can be given, and where it comes from.
struct MemoryBound {
  std::size_t bytes = 0;
  std::string source;  // "MemAvailable + SwapFree in /proc/meminfo", ...
  // Pages (true) or address space (false): memory mapped but not yet
  // written takes no pages yet, but will (see reserveUntouched).
  bool pages = true;
};

// This process's mapped address space (VmSize in /proc/self/status), in
// bytes; 0 when it cannot be read.
std::size_t mappedBytes();

// What the machine can give this process now, each bound found:
// - MemAvailable + SwapFree (/proc/meminfo): what can be taken without
//   the out-of-memory killer;
// - a cgroup's memory.max (v2) or memory.limit_in_bytes (v1) less what the
//   cgroup already uses: a container's limit, which /proc/meminfo ignores;
// - RLIMIT_AS (`ulimit -v`) less this process's mapped size (VmSize).
// (RLIMIT_DATA does not apply: the host device maps shared memory.) Bounds
// that cannot be read are left out; none found gives an empty list.
std::vector<MemoryBound> hostMemoryBounds();

// Lowers the page bounds by `untouched`: bytes of earlier allocations that
// are mapped but not written yet, whose pages the bounds do not count.
void reserveUntouched(std::vector<MemoryBound>& bounds, std::size_t untouched);

// Empty when an allocation of `bytes` fits every bound; else the reason,
// naming the bytes and the tightest bound with its source.
std::string hostAllocationProblem(std::size_t bytes, const std::vector<MemoryBound>& bounds);

}  // namespace hir
