#include "device/cuda/kernel_stamps.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"

namespace hir::cuda {

namespace {
// 2.5 MiB of records: the last 65,536 kernels.
constexpr uint32_t kStampCapacity = 1u << 16;
}  // namespace

std::unique_ptr<KernelStampRing> KernelStampRing::create(const std::string& prefix, int ordinal) {
  if (prefix.empty()) return nullptr;
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
  const KernelStampSink sink{static_cast<KernelStamp*>(ring), static_cast<uint32_t*>(next),
                             kStampCapacity - 1};
  return std::unique_ptr<KernelStampRing>(new KernelStampRing(prefix, ordinal, sink));
}

KernelStampRing::KernelStampRing(std::string prefix, int ordinal, KernelStampSink sink)
    : prefix_(std::move(prefix)), ordinal_(ordinal), sink_(sink) {}

KernelStampRing::~KernelStampRing() {
  (void)cudaFree(sink_.ring);
  (void)cudaFree(sink_.next);
}

void KernelStampRing::save() const {
  uint32_t written = 0;
  const uint32_t capacity = sink_.mask + 1;
  std::vector<KernelStamp> records(capacity);
  if (cudaMemcpy(&written, sink_.next, sizeof written, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(records.data(), sink_.ring, sizeof(KernelStamp) * capacity,
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
  const uint32_t kept = written < capacity ? written : capacity;
  for (uint32_t i = written - kept; i != written; ++i) {
    const KernelStamp& r = records[i & sink_.mask];
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
