// The kernel stamps' ring of one CUDA device (HIR_CUDA_STAMPS, a diagnosis:
// docs/cli.md): where the small messages' and reductions' kernels spend
// their time, without a profiler. cuda_kernels.h's setKernelStamps says what
// a record holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace hir::cuda {

struct KernelStamp;

class KernelStampRing {
 public:
  // A ring of `capacity` records on the current device (ordinal), set as
  // the process's (setKernelStamps), when HIR_CUDA_STAMPS names a path
  // prefix; null when it is unset or empty.
  static std::unique_ptr<KernelStampRing> fromEnv(int ordinal);
  ~KernelStampRing();  // stops the stamps and frees the ring
  KernelStampRing(const KernelStampRing&) = delete;
  KernelStampRing& operator=(const KernelStampRing&) = delete;

  // Writes the ring's records, oldest first, to PREFIX.gpuORDINAL.PID.csv
  // (the device must have finished the kernels that write them). Best
  // effort: a failure is logged, never thrown (it runs at teardown).
  void save() const;

 private:
  KernelStampRing(std::string prefix, int ordinal, KernelStamp* ring, uint32_t* next,
                  uint32_t capacity);
  std::string prefix_;
  int ordinal_;
  KernelStamp* ring_;
  uint32_t* next_;
  uint32_t capacity_;
};

}  // namespace hir::cuda
