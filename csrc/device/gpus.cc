#include "device/gpus.h"

#include <fmt/format.h>


#ifdef HIR_WITH_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace hir {

int visibleGpuCount(std::string* why) {
#ifdef HIR_WITH_CUDA
  return cudaVisibleGpuCount(why);
#else
  if (why) *why = "this build of hostir has no CUDA";
  return 0;
#endif
}

std::string localRanksProblem(int local_ranks, int gpus, std::string_view how,
                              const char* visible_devices) {
  if (local_ranks <= gpus) return "";
  std::string visible =
      visible_devices ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", visible_devices) : "";
  if (gpus <= 0)
    return fmt::format("{}, but no GPU is visible{}", how, visible);
  return fmt::format(
      "{}, but only {} GPU{} {} visible{}: each rank needs a GPU of its own; run at most {} "
      "rank{} per machine, or use --device host (HIR_SHARE_GPUS=1 lets ranks share a GPU when "
      "the program has no nccl communication)",
      how, gpus, gpus == 1 ? "" : "s", gpus == 1 ? "is" : "are", visible, gpus,
      gpus == 1 ? "" : "s");
}

bool gpuSharingAllowed(const Settings& settings) { return settings.on(Setting::ShareGpus); }

}  // namespace hir
