// Kernel plugins (hostir/kernel.h, `hir run --plugin`): a shared library
// whose hostir_register_kernels() adds its kernels to the registry.
#include <dlfcn.h>

#include <string>

#include <hostir/kernel.h>

#include "common/check.h"

namespace hir {

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
