// The GPUs the launcher counts and its rule: each local rank of the cuda
// device needs a GPU of its own (device/gpus.h).
#include "device/gpus.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <hostir/error.h>

namespace hir {
namespace {

TEST(LocalRanksRule, AsManyGpusAsRanksOrMoreIsFine) {
  EXPECT_EQ(localRanksProblem(2, 2, "--np 2 starts 2 ranks on this machine", nullptr), "");
  EXPECT_EQ(localRanksProblem(1, 8, "--np 1 starts 1 ranks on this machine", nullptr), "");
}

TEST(LocalRanksRule, MoreRanksThanGpusIsRefusedWithTheNumbers) {
  EXPECT_EQ(localRanksProblem(4, 2, "--np 4 starts 4 ranks on this machine", nullptr),
            "--np 4 starts 4 ranks on this machine, but only 2 GPUs are visible: each rank "
            "needs a GPU of its own; run at most 2 ranks per machine, or use --device host "
            "(HIR_SHARE_GPUS=1 lets ranks share a GPU when the program has no nccl "
            "communication)");
  EXPECT_EQ(localRanksProblem(3, 1, "the MPI job runs 3 ranks on node7", "2"),
            "the MPI job runs 3 ranks on node7, but only 1 GPU is visible "
            "(CUDA_VISIBLE_DEVICES=2): each rank needs a GPU of its own; run at most 1 rank per "
            "machine, or use --device host (HIR_SHARE_GPUS=1 lets ranks share a GPU when the "
            "program has no nccl communication)");
  EXPECT_EQ(localRanksProblem(2, 0, "--np 2 starts 2 ranks on this machine", ""),
            "--np 2 starts 2 ranks on this machine, but no GPU is visible "
            "(CUDA_VISIBLE_DEVICES=)");
}

// This machine's count, whatever it is, comes with a reason when it is 0.
TEST(VisibleGpuCount, ZeroSaysWhy) {
  std::string why;
  const int gpus = visibleGpuCount(&why);
  EXPECT_GE(gpus, 0);
  if (gpus == 0) EXPECT_FALSE(why.empty());
  EXPECT_EQ(visibleGpuCount(), gpus);
}

// HIR_SHARE_GPUS: 1 allows sharing, unset/empty/0 do not, anything else is
// bad usage naming the value.
TEST(GpuSharing, OnlyOneAllowsItAndAnyOtherValueIsAUsageError) {
  const char* before = std::getenv("HIR_SHARE_GPUS");
  const std::string saved = before ? before : "";
  unsetenv("HIR_SHARE_GPUS");
  EXPECT_FALSE(gpuSharingAllowed(Settings::fromEnvironment()));
  setenv("HIR_SHARE_GPUS", "0", 1);
  EXPECT_FALSE(gpuSharingAllowed(Settings::fromEnvironment()));
  setenv("HIR_SHARE_GPUS", "1", 1);
  EXPECT_TRUE(gpuSharingAllowed(Settings::fromEnvironment()));
  setenv("HIR_SHARE_GPUS", "yes", 1);
  try {
    gpuSharingAllowed(Settings::fromEnvironment());
    ADD_FAILURE() << "HIR_SHARE_GPUS=yes was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("got 'yes'"), std::string::npos) << e.what();
  }
  if (before) setenv("HIR_SHARE_GPUS", saved.c_str(), 1); else unsetenv("HIR_SHARE_GPUS");
}

}  // namespace
}  // namespace hir
