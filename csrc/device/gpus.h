// Internal: how many GPUs this machine gives its ranks, and the rule the
// launcher applies before it starts any (docs/cli.md, `--np`): every local
// rank of the cuda device needs a GPU of its own (NCCL refuses two ranks on
// one GPU, and the cuda device would otherwise pick one GPU twice).
#pragma once

#include <string>
#include <string_view>

#include <hostir/settings.h>

namespace hir {

// The GPUs the CUDA runtime shows this process (cudaGetDeviceCount, so
// CUDA_VISIBLE_DEVICES applies); 0 in a build without CUDA, without a
// driver or without a GPU, and then `why` (when given) says which.
int visibleGpuCount(std::string* why = nullptr);

// Empty when `local_ranks` ranks of one machine each get one of `gpus`
// GPUs; else the one-line reason to refuse the launch. `how` says where the
// ranks come from ("--np 4 starts 4 ranks on this machine");
// `visible_devices` is CUDA_VISIBLE_DEVICES (null when unset), named in the
// reason since it is what usually hides GPUs.
std::string localRanksProblem(int local_ranks, int gpus, std::string_view how,
                              const char* visible_devices);

// HIR_SHARE_GPUS=1: the user lets several local ranks share a GPU (the
// cuda device then takes GPU local_rank % count), which CUDA IPC, the host
// side and compute allow and the nccl backend refuses at setup, naming the
// ranks (NCCL needs a GPU per rank): for testing ipc programs on a machine
// with fewer GPUs than ranks (Setting::ShareGpus).
bool gpuSharingAllowed(const Settings& settings);

}  // namespace hir
