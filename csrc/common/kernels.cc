// The registry of kernels an embedder registers (hostir/kernel.h), and the
// loading of kernel plugins.
#include <dlfcn.h>

#include <algorithm>
#include <mutex>

#include <hostir/kernel.h>

#include "common/check.h"

namespace hir {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<KernelInfo> kernels;
};

Registry& registry() {
  static Registry r;
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
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const KernelInfo& k : r.kernels)
    HIR_CHECK_AS(UsageError, k.name != info.name,
                 "registerKernel: a kernel named '{}' is already registered", info.name);
  r.kernels.push_back(std::move(info));
}

const KernelInfo* findKernel(std::string_view name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const KernelInfo& k : r.kernels)
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<std::string> kernelNames() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const KernelInfo& k : r.kernels) out.push_back(k.name);
  std::sort(out.begin(), out.end());
  return out;
}

void loadKernelPlugin(const std::string& path) {
  // RTLD_NODELETE: registered functions stay valid for the process.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) {
    const char* why = dlerror();
    throw UsageError(fmt::format("--plugin {}: cannot load it: {}", path, why ? why : "unknown"));
  }
  using RegisterFn = void (*)();
  auto fn = reinterpret_cast<RegisterFn>(dlsym(lib, "hostir_register_kernels"));
  HIR_CHECK_AS(UsageError, fn != nullptr,
               "--plugin {}: it has no function hostir_register_kernels() (declare it extern "
               "\"C\" and export it)",
               path);
  fn();
}

}  // namespace hir
