#include "device/cuda/driver_api.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace hir::cuda {

namespace {

// The ABI the function pointers are declared for: asking for the CUDA 12.0
// version of a symbol returns its newest form that is ABI compatible with
// 12.0 (for the stream memory operations, the _v2 entry points of 11.7).
constexpr unsigned int kDriverAbiVersion = 12000;

// Resolves `symbol`; on failure appends the reason to `missing` and returns null.
void* resolve(const char* symbol, std::string& missing) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &fn, kDriverAbiVersion,
                                                     cudaEnableDefault, &status);
  if (err != cudaSuccess) {
    // Leave no stale error behind for later calls of the runtime.
    (void)cudaGetLastError();
    missing += fmt::format("{}{}: cudaGetDriverEntryPointByVersion failed: {}",
                           missing.empty() ? "" : "; ", symbol, cudaGetErrorString(err));
    return nullptr;
  }
  if (fn == nullptr || status != cudaDriverEntryPointSuccess) {
    const char* why = status == cudaDriverEntryPointVersionNotSufficent
                          ? "the driver is older than CUDA 12.0"
                          : "the driver does not provide it";
    missing += fmt::format("{}{}: {}", missing.empty() ? "" : "; ", symbol, why);
    return nullptr;
  }
  return fn;
}

DriverApi load() {
  DriverApi api;
  std::string unused;
  api.getErrorString =
      reinterpret_cast<DriverApi::GetErrorStringFn>(resolve("cuGetErrorString", unused));
  api.streamWriteValue32 =
      reinterpret_cast<DriverApi::StreamValue32Fn>(resolve("cuStreamWriteValue32", api.missing));
  api.streamWaitValue32 =
      reinterpret_cast<DriverApi::StreamValue32Fn>(resolve("cuStreamWaitValue32", api.missing));
  return api;
}

}  // namespace

std::string DriverApi::describe(CUresult r) const {
  const char* text = nullptr;
  if (getErrorString == nullptr || getErrorString(r, &text) != CUDA_SUCCESS || text == nullptr)
    return fmt::format("CUresult {}", static_cast<int>(r));
  return fmt::format("{} (CUresult {})", text, static_cast<int>(r));
}

const DriverApi& driverApi() {
  static const DriverApi api = load();
  return api;
}

}  // namespace hir::cuda
