// Test and benchmark helpers of the CUDA device (not part of the interface).
#pragma once

#include <hostir/device.h>

namespace hir::cuda {

// Enqueues on `s` (a stream of a "cuda" device) one kernel that busy-waits
// `ms` milliseconds of GPU time: work after it on `s` starts that much later.
void testSpin(Stream& s, double ms);

}  // namespace hir::cuda
