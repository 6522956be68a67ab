// The few CUDA driver API functions hostir needs, resolved at run time through
// cudaGetDriverEntryPointByVersion. No binary links libcuda: the statically
// linked CUDA runtime loads the driver itself, so every binary starts on a
// machine without a GPU driver and fails only when a GPU is actually used.
//
// Only the stream memory operations are resolved. NVLink multicast
// (cuMulticast*) is never used by hostir: it can put a shared host's GPUs out
// of service.
#pragma once

#include <cuda.h>  // types and enums only

#include <string>

namespace hir::cuda {

struct DriverApi {
  using StreamValue32Fn = CUresult(CUDAAPI*)(CUstream stream, CUdeviceptr addr,
                                              cuuint32_t value, unsigned int flags);
  using GetErrorStringFn = CUresult(CUDAAPI*)(CUresult error, const char** text);

  // cuStreamWriteValue32 / cuStreamWaitValue32 in their CUDA 12 form (the
  // "v2" memory operations, always enabled since CUDA 12, whatever
  // CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 says). Null when missing.
  StreamValue32Fn streamWriteValue32 = nullptr;
  StreamValue32Fn streamWaitValue32 = nullptr;
  GetErrorStringFn getErrorString = nullptr;

  // Empty when both stream memory operations were found; else why not.
  std::string missing;

  bool hasStreamMemOps() const { return streamWriteValue32 && streamWaitValue32; }
  // "CUDA_ERROR_xxx: text" for a driver result.
  std::string describe(CUresult r) const;
};

// Resolved once (thread-safe) on first use. Needs a working CUDA runtime;
// never throws: what failed is in `missing`.
const DriverApi& driverApi();

}  // namespace hir::cuda
