// The cuda device's matmul (DeviceFeature::Compute) through cuBLAS: one
// handle per device, created on first use. Its elementwise add is a kernel
// (cuda_kernels.h). Keeps cuBLAS's headers out of cuda_device.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>

#include <hostir/device.h>

namespace hir::cuda {

class Cublas {
 public:
  explicit Cublas(int ordinal) : ordinal_(ordinal) {}
  // Destroys the handle, if one was created and not abandoned. cublasDestroy
  // waits for the whole device (cudaDeviceSynchronize).
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  // Enqueues out (+)= op(a) * op(b) on `stream` as cublasGemmEx with
  // CUBLAS_COMPUTE_32F (no TF32), alpha 1, beta accumulate ? 1 : 0. The
  // device must be current and `args` checked (checkMatmulArgs). Thread-safe:
  // the handle's stream is set and used under a lock.
  void matmul(cudaStream_t stream, const MatmulArgs& args);

  // Leaves the handle to the process exit: for a device whose work may never
  // finish, where cublasDestroy would hang.
  void abandon();

 private:
  int ordinal_;
  std::mutex mutex_;
  void* handle_ = nullptr;  // cublasHandle_t
};

}  // namespace hir::cuda
