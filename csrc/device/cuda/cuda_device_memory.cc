// The CUDA device's memory (cuda_device.h says how it behaves): zeroed
// allocations, the check records in mapped host memory, and the CUDA IPC
// handles through which another process maps an allocation.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "common/check.h"
#include "device/cuda_interop.h"
#include "device/cuda/cuda_device_impl.h"
#include "device/host_memory.h"

namespace hir::cuda {

namespace {

// Size of a zero-byte allocation: a real, unique block of CUDA's alignment.
constexpr std::size_t kZeroByteAllocation = 256;

}  // namespace

// ----------------------------------------------------------------- memory

void* CudaDevice::allocate(std::size_t bytes) {
  activate(ordinal_);
  const std::size_t size = bytes ? bytes : kZeroByteAllocation;
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: the device stays usable
    throw RuntimeError(outOfMemory(size));
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw BackendError(fmt::format("cuda: cudaMalloc of {} bytes failed on device {}: {} ({})",
                                   size, ordinal_, cudaGetErrorString(err),
                                   cudaGetErrorName(err)));
  }
  try {
    std::lock_guard lock(mutex_);
    HIR_CUDA_CHECK(ordinal_, cudaMemsetAsync(p, 0, size, zero_stream_));
    HIR_CHECK_AS(TimeoutError, drain(zero_stream_, kHousekeepingTimeout),
                 "cuda: zeroing a new allocation of {} bytes on device {} took more than {} ms",
                 size, ordinal_, kHousekeepingTimeout.count());
    allocations_.emplace(p, size);
  } catch (...) {
    (void)cudaFree(p);
    throw;
  }
  return p;
}

// What a refused cudaMalloc says: the bytes asked for and what the GPU
// has (another process may hold the rest).
std::string CudaDevice::outOfMemory(std::size_t size) const {
  std::size_t free_bytes = 0, total_bytes = 0;
  std::string have = "cudaMemGetInfo failed too";
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    have = fmt::format("{} free of {} (cudaMemGetInfo)", describeBytes(free_bytes),
                       describeBytes(total_bytes));
  (void)cudaGetLastError();
  return fmt::format("cuda: cannot allocate {} on device {} ({}): out of GPU memory, {}",
                     describeBytes(size), ordinal_, name_, have);
}

void CudaDevice::deallocate(void* p) {
  if (p == nullptr) return;
  activate(ordinal_);
  {
    std::lock_guard lock(mutex_);
    HIR_INTERNAL_ASSERT(allocations_.erase(p) == 1,
                        "cuda deallocate: {} is not a live allocation of device {}", p,
                        ordinal_);
  }
  // cudaFree waits for the work in flight on the device, like the host
  // device's deallocate.
  HIR_CUDA_CHECK(ordinal_, cudaFree(p));
}

CheckRecord* CudaDevice::allocateCheckRecords(std::size_t n) {
  activate(ordinal_);
  const std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(CheckRecord);
  void* host = nullptr;
  HIR_CUDA_CHECK(ordinal_,
                 cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  auto* records = static_cast<CheckRecord*>(host);
  for (std::size_t i = 0; i < std::max<std::size_t>(n, 1); ++i)
    new (records + i) CheckRecord();  // zeros, first_execution = -1
  void* device = nullptr;
  cudaError_t err = cudaHostGetDevicePointer(&device, host, 0);
  if (err != cudaSuccess) {
    (void)cudaFreeHost(host);
    throwCudaError(err, "cudaHostGetDevicePointer", ordinal_);
  }
  std::lock_guard lock(mutex_);
  check_blocks_[reinterpret_cast<uintptr_t>(host)] = {bytes, device};
  return records;
}

void CudaDevice::freeCheckRecords(CheckRecord* p) {
  if (p == nullptr) return;
  activate(ordinal_);
  {
    std::lock_guard lock(mutex_);
    HIR_INTERNAL_ASSERT(check_blocks_.erase(reinterpret_cast<uintptr_t>(p)) == 1,
                        "cuda freeCheckRecords: {} was not allocated by device {}",
                        static_cast<void*>(p), ordinal_);
  }
  HIR_CUDA_CHECK(ordinal_, cudaFreeHost(p));
}

// Device view of a record inside a block from allocateCheckRecords().
CheckRecord* CudaDevice::devicePointerOf(CheckRecord* host) {
  const auto addr = reinterpret_cast<uintptr_t>(host);
  std::lock_guard lock(mutex_);
  auto it = check_blocks_.upper_bound(addr);
  HIR_INTERNAL_ASSERT(it != check_blocks_.begin(),
                      "cuda check: record {} was not allocated by device {}",
                      static_cast<void*>(host), ordinal_);
  --it;
  const std::size_t offset = addr - it->first;
  HIR_INTERNAL_ASSERT(offset + sizeof(CheckRecord) <= it->second.bytes,
                      "cuda check: record {} was not allocated by device {}",
                      static_cast<void*>(host), ordinal_);
  return reinterpret_cast<CheckRecord*>(static_cast<char*>(it->second.device) + offset);
}

// -------------------------------------------------------------------- IPC

MemoryHandle CudaDevice::exportMemory(void* p) {
  {
    std::lock_guard lock(mutex_);
    HIR_INTERNAL_ASSERT(allocations_.count(p) == 1,
                        "cuda exportMemory: {} is not the start of an allocation of device {}",
                        p, ordinal_);
  }
  activate(ordinal_);
  cudaIpcMemHandle_t handle{};
  HIR_CUDA_CHECK(ordinal_, cudaIpcGetMemHandle(&handle, p));
  MemoryHandle out;
  out.bytes.resize(sizeof(handle));
  std::memcpy(out.bytes.data(), &handle, sizeof(handle));
  return out;
}

void* CudaDevice::importMemory(const MemoryHandle& h) {
  HIR_CHECK_AS(BackendError, h.bytes.size() == sizeof(cudaIpcMemHandle_t),
               "cuda importMemory on device {}: expected a {}-byte CUDA IPC handle, got {} "
               "bytes (exported by another device kind?)",
               ordinal_, sizeof(cudaIpcMemHandle_t), h.bytes.size());
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, h.bytes.data(), sizeof(handle));
  activate(ordinal_);
  void* p = nullptr;
  HIR_CUDA_CHECK(ordinal_, cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess));
  std::lock_guard lock(mutex_);
  ++imports_[p];  // CUDA counts opens of one handle; so do we, for cleanup
  return p;
}

void CudaDevice::closeImported(void* p) {
  {
    std::lock_guard lock(mutex_);
    auto it = imports_.find(p);
    HIR_INTERNAL_ASSERT(it != imports_.end(),
                        "cuda closeImported: {} is not memory imported on device {}", p,
                        ordinal_);
    if (--it->second == 0) imports_.erase(it);
  }
  activate(ordinal_);
  HIR_CUDA_CHECK(ordinal_, cudaIpcCloseMemHandle(p));
}

}  // namespace hir::cuda
