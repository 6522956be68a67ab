// The cuda device's matmul through cuBLAS (see cuda_compute.h).
#include "device/cuda/cuda_compute.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "common/check.h"
#include "device/cuda_interop.h"

namespace hir::cuda {

namespace {

// cuBLAS is loaded on the first matmul, not linked: loading it runs
// cuBLASLt's static set-up, about 0.15 s of CPU, which every process of
// the library (each `hir` rank, each test, on machines without a GPU too)
// would pay at its start. The library is looked up by its soname first
// (LD_LIBRARY_PATH, the system's paths), then where the build found it.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // The C function (C++ also sees an overload taking a cudaDataType).
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                         const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                         int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                         cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
};

// The loaded functions; throws BackendError naming what was tried once the
// library or a symbol is missing (every call again: nothing is retried).
const CublasApi& cublasApi(int ordinal) {
  struct Loaded {
    CublasApi api;
    std::string failure;  // empty once every function is there
  };
  static const Loaded loaded = [] {
    Loaded l;
    std::string tried;
    void* lib = nullptr;
    for (const char* name : {HIR_CUBLAS_SONAME, HIR_CUBLAS_PATH}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* why = dlerror();
      tried += fmt::format("{}{} ({})", tried.empty() ? "" : ", ", name, why ? why : "not found");
    }
    if (lib == nullptr) {
      l.failure = "cannot load cuBLAS: tried " + tried;
      return l;
    }
    auto load = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (fn == nullptr && l.failure.empty()) l.failure = fmt::format("cuBLAS has no {}", symbol);
    };
    load(l.api.create, "cublasCreate_v2");
    load(l.api.destroy, "cublasDestroy_v2");
    load(l.api.set_stream, "cublasSetStream_v2");
    load(l.api.gemm, "cublasGemmEx");
    load(l.api.status_string, "cublasGetStatusString");
    load(l.api.status_name, "cublasGetStatusName");
    return l;
  }();
  HIR_CHECK_AS(BackendError, loaded.failure.empty(), "cuda: matmul on device {}: {}", ordinal,
               loaded.failure);
  return loaded.api;
}

// Throws BackendError "cuda: <call> failed on device N: <text> (<name>)".
void cublasCheck(cublasStatus_t status, const char* call, int ordinal) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  (void)cudaGetLastError();  // a failed launch inside cuBLAS must not resurface later
  const CublasApi& api = cublasApi(ordinal);
  throw BackendError(fmt::format("cuda: {} failed on device {}: {} ({})", call, ordinal,
                                 api.status_string(status), api.status_name(status)));
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
  // A handle exists only where cublasApi() loaded.
  (void)cublasApi(ordinal_).destroy(static_cast<cublasHandle_t>(handle_));
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
  const CublasApi& api = cublasApi(ordinal_);
  std::lock_guard lock(mutex_);
  if (handle_ == nullptr) {
    cublasHandle_t h = nullptr;
    cublasCheck(api.create(&h), "cublasCreate", ordinal_);
    handle_ = h;
  }
  auto h = static_cast<cublasHandle_t>(handle_);
  cublasCheck(api.set_stream(h, stream), "cublasSetStream", ordinal_);
  // cuBLAS is column-major, where a row-major matrix reads as its transpose:
  // out^T = op(b)^T * op(a)^T, so b comes first and m and n swap places.
  cublasCheck(api.gemm(h, x.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           x.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(x.n),
                           static_cast<int>(x.m), static_cast<int>(x.k), &alpha, x.b, type,
                           static_cast<int>(x.ldb), x.a, type, static_cast<int>(x.lda), &beta,
                           x.out, type, static_cast<int>(x.ldo), CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx", ordinal_);
}

}  // namespace hir::cuda
