// The cuda device's matmul through cuBLAS (see cuda_compute.h).
#include "device/cuda/cuda_compute.h"

#include <cublas_v2.h>

#include "common/check.h"
#include "device/cuda_interop.h"

namespace hir::cuda {

namespace {

// Throws BackendError "cuda: <call> failed on device N: <text> (<name>)".
void cublasCheck(cublasStatus_t status, const char* call, int ordinal) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  (void)cudaGetLastError();  // a failed launch inside cuBLAS must not resurface later
  throw BackendError(fmt::format("cuda: {} failed on device {}: {} ({})", call, ordinal,
                                 cublasGetStatusString(status), cublasGetStatusName(status)));
}

cudaDataType_t cudaTypeOf(DType t) {
  switch (t) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    default: break;
  }
  HIR_INTERNAL_ASSERT(false, "cuda matmul: dtype {} is not float32, float16 or bfloat16",
                      toString(t));
}

}  // namespace

Cublas::~Cublas() {
  if (handle_ == nullptr) return;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != ordinal_) (void)cudaSetDevice(ordinal_);
  (void)cublasDestroy(static_cast<cublasHandle_t>(handle_));
  (void)cudaGetLastError();
}

void Cublas::abandon() {
  std::lock_guard lock(mutex_);
  handle_ = nullptr;
}

void Cublas::matmul(cudaStream_t stream, const MatmulArgs& x) {
  if (x.m == 0 || x.n == 0) return;
  if (x.k == 0) {  // an empty sum: out = 0, or out unchanged
    if (x.accumulate) return;
    const std::size_t el = dtypeSize(x.dtype);
    HIR_CUDA_CHECK(ordinal_, cudaMemset2DAsync(x.out, static_cast<std::size_t>(x.ldo) * el, 0,
                                               static_cast<std::size_t>(x.n) * el,
                                               static_cast<std::size_t>(x.m), stream));
    return;
  }
  const cudaDataType_t type = cudaTypeOf(x.dtype);
  const float alpha = 1.0f;
  const float beta = x.accumulate ? 1.0f : 0.0f;
  std::lock_guard lock(mutex_);
  if (handle_ == nullptr) {
    cublasHandle_t h = nullptr;
    cublasCheck(cublasCreate(&h), "cublasCreate", ordinal_);
    handle_ = h;
  }
  auto h = static_cast<cublasHandle_t>(handle_);
  cublasCheck(cublasSetStream(h, stream), "cublasSetStream", ordinal_);
  // cuBLAS is column-major, where a row-major matrix reads as its transpose:
  // out^T = op(b)^T * op(a)^T, so b comes first and m and n swap places.
  cublasCheck(cublasGemmEx(h, x.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           x.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(x.n),
                           static_cast<int>(x.m), static_cast<int>(x.k), &alpha, x.b, type,
                           static_cast<int>(x.ldb), x.a, type, static_cast<int>(x.lda), &beta,
                           x.out, type, static_cast<int>(x.ldo), CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx", ordinal_);
}

}  // namespace hir::cuda
