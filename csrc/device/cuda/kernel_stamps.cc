#include "device/cuda/kernel_stamps.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "device/cuda/cuda_kernels.h"

namespace hir::cuda {

namespace {
// 2.5 MiB of records: the last 65,536 kernels.
constexpr uint32_t kStampCapacity = 1u << 16;
}  // namespace

std::unique_ptr<KernelStampRing> KernelStampRing::fromEnv(int ordinal) {
  const char* prefix = std::getenv("HIR_CUDA_STAMPS");
  if (prefix == nullptr || *prefix == '\0') return nullptr;
  void* ring = nullptr;
  void* next = nullptr;
  if (cudaMalloc(&ring, sizeof(KernelStamp) * kStampCapacity) != cudaSuccess ||
      cudaMalloc(&next, sizeof(uint32_t)) != cudaSuccess ||
      cudaMemset(ring, 0, sizeof(KernelStamp) * kStampCapacity) != cudaSuccess ||
      cudaMemset(next, 0, sizeof(uint32_t)) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(ring);
    (void)cudaFree(next);
    HIR_LOG_WARN(Subsys::Cuda, "HIR_CUDA_STAMPS: no room for the stamps' ring on device {}; "
                 "no stamps", ordinal);
    return nullptr;
  }
  auto* r = static_cast<KernelStamp*>(ring);
  auto* n = static_cast<uint32_t*>(next);
  setKernelStamps(r, n, kStampCapacity);
  return std::unique_ptr<KernelStampRing>(
      new KernelStampRing(prefix, ordinal, r, n, kStampCapacity));
}

KernelStampRing::KernelStampRing(std::string prefix, int ordinal, KernelStamp* ring,
                                 uint32_t* next, uint32_t capacity)
    : prefix_(std::move(prefix)), ordinal_(ordinal), ring_(ring), next_(next),
      capacity_(capacity) {}

KernelStampRing::~KernelStampRing() {
  setKernelStamps(nullptr, nullptr, 0);
  (void)cudaFree(ring_);
  (void)cudaFree(next_);
}

void KernelStampRing::save() const {
  uint32_t written = 0;
  std::vector<KernelStamp> records(capacity_);
  if (cudaMemcpy(&written, next_, sizeof written, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(records.data(), ring_, sizeof(KernelStamp) * capacity_,
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    (void)cudaGetLastError();
    HIR_LOG_WARN(Subsys::Cuda, "HIR_CUDA_STAMPS: reading device {}'s stamps failed", ordinal_);
    return;
  }
  const std::string path = fmt::format("{}.gpu{}.{}.csv", prefix_, ordinal_, getpid());
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    HIR_LOG_WARN(Subsys::Cuda, "HIR_CUDA_STAMPS: cannot write '{}'", path);
    return;
  }
  std::fprintf(f,
               "kind,sm,entry_ns,followed_ns,numbered_ns,slotted_ns,copied_ns,pushed_ns,waited_ns,"
               "end_ns\n");
  const uint32_t kept = written < capacity_ ? written : capacity_;
  for (uint32_t i = written - kept; i != written; ++i) {
    const KernelStamp& r = records[i & (capacity_ - 1)];
    std::fprintf(f, "%u,%u,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", r.kind, r.sm,
                 static_cast<unsigned long long>(r.entry),
                 static_cast<unsigned long long>(r.followed),
                 static_cast<unsigned long long>(r.numbered),
                 static_cast<unsigned long long>(r.slotted),
                 static_cast<unsigned long long>(r.copied),
                 static_cast<unsigned long long>(r.pushed),
                 static_cast<unsigned long long>(r.waited),
                 static_cast<unsigned long long>(r.end));
  }
  std::fclose(f);
  HIR_LOG_INFO(Subsys::Cuda, "HIR_CUDA_STAMPS: {} of {} kernel records in '{}'", kept, written,
               path);
}

}  // namespace hir::cuda
