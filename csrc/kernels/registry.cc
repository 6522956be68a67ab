// The registry of kernels that an embedder or a plugin registers by name
// (hostir/kernel.h), where validation and the evaluator find them, and
// KernelLaunch::arg, the one call of a launch that is not inline.
#include <algorithm>
#include <mutex>

#include <hostir/kernel.h>

#include "common/check.h"

namespace hir {
namespace {

struct KernelRegistry {
  std::mutex mutex;
  std::vector<KernelInfo> kernels;
};

KernelRegistry& kernels() {
  static KernelRegistry r;
  return r;
}

}  // namespace

int64_t KernelLaunch::arg(std::string_view name) const {
  for (const auto& [n, v] : args)
    if (n == name) return v;
  throw UsageError(fmt::format("kernel '{}' asked for arg '{}', which its node does not give",
                               kernel, name));
}

void registerKernel(KernelInfo info) {
  HIR_CHECK_AS(UsageError, !info.name.empty() && info.fn != nullptr,
               "registerKernel: kernel '{}' has no {}", info.name,
               info.name.empty() ? "name" : "function");
  HIR_CHECK_AS(UsageError, !info.devices.empty(),
               "registerKernel: kernel '{}' names no device kind it runs on", info.name);
  KernelRegistry& r = kernels();
  std::lock_guard lock(r.mutex);
  for (const KernelInfo& k : r.kernels)
    HIR_CHECK_AS(UsageError, k.name != info.name,
                 "registerKernel: a kernel named '{}' is already registered", info.name);
  r.kernels.push_back(std::move(info));
}

const KernelInfo* findKernel(std::string_view name) {
  KernelRegistry& r = kernels();
  std::lock_guard lock(r.mutex);
  for (const KernelInfo& k : r.kernels)
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<std::string> kernelNames() {
  KernelRegistry& r = kernels();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const KernelInfo& k : r.kernels) out.push_back(k.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace hir
