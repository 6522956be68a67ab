// The kernel stamps' ring of one CUDA device (HIR_CUDA_STAMPS, a diagnosis:
// docs/cli.md): where the small messages' and reductions' kernels spend
// their time, without a profiler. cuda_kernels.h's KernelStamp says what a
// record holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "device/cuda/cuda_kernels.h"

namespace hir::cuda {

class KernelStampRing {
 public:
  // A ring of records on the current device (ordinal) when `prefix`
  // (HIR_CUDA_STAMPS) names a path prefix; null when it is empty.
  static std::unique_ptr<KernelStampRing> create(const std::string& prefix, int ordinal);
  ~KernelStampRing();  // frees the ring: no kernel given sink() may still run

  // What the device's launches pass for their kernels to write into.
  const KernelStampSink& sink() const { return sink_; }
  KernelStampRing(const KernelStampRing&) = delete;
  KernelStampRing& operator=(const KernelStampRing&) = delete;

  // Writes the ring's records, oldest first, to PREFIX.gpuORDINAL.PID.csv
  // (the device must have finished the kernels that write them). Best
  // effort: a failure is logged, never thrown (it runs at teardown).
  void save() const;

 private:
  KernelStampRing(std::string prefix, int ordinal, KernelStampSink sink);
  std::string prefix_;
  int ordinal_;
  KernelStampSink sink_;  // its ring and counter, in device memory
};

}  // namespace hir::cuda
