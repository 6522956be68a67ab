// Default behaviour of Backend, and the registry of backends by name.
#include <hostir/backend.h>

#include <mutex>

#include "backends/ipc_backend.h"
#include "backends/mpi_backend.h"
#include "common/check.h"
#ifdef HIR_WITH_CUDA
#include "backends/nccl/nccl_backend.h"
#endif

namespace hir {

bool Backend::postJoined(std::span<const PostArgs> ops, Stream& current, Event& done) {
  post(ops, current, done);
  return false;
}

void Backend::wait(Event& done, Stream& current, WaitMode mode, Duration timeout) {
  HIR_INTERNAL_ASSERT(device_ != nullptr, "backend '{}' waited on before setup()", name());
  switch (mode) {
    case WaitMode::Stream:
      device_->wait(current, done);
      return;
    case WaitMode::Host:
      device_->synchronize(done, timeout);
      return;
  }
  HIR_INTERNAL_ASSERT(false, "unknown wait mode {}", static_cast<int>(mode));
}

void Backend::shareMemHandles(std::span<const ShareItem> items) {
  HIR_CHECK(items.empty(),
            "backend '{}' does not exchange memory handles, yet share_mem_handles lists {} "
            "item(s) for it",
            name(), items.size());
}

void Backend::abort() {}

namespace {

struct Registry {
  // Recursive: registering the built-ins goes through registerBackend().
  std::recursive_mutex mutex;
  std::vector<BackendInfo> backends;
  bool builtins_registered = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The built-in backends register on first use of the registry, so that a
// program linking the library statically still finds them (no static
// initializers to be dropped by the linker).
void registerBuiltins(Registry& r) {
  std::lock_guard lock(r.mutex);
  if (r.builtins_registered) return;
  r.builtins_registered = true;  // first: the calls below re-enter the registry
  registerMpiBackend();
#ifdef HIR_WITH_CUDA
  registerNcclBackend();
#endif
  registerIpcBackend();  // cuda and host devices
}

std::string describeQuery(const SupportQuery& q) {
  return fmt::format("{} of {} on device '{}'", toString(q.type), toString(q.dtype), q.device);
}

std::string prefix(std::string_view path) {
  return path.empty() ? std::string() : fmt::format("{}: ", path);
}

}  // namespace

void registerBackend(BackendInfo info) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  registerBuiltins(r);
  HIR_INTERNAL_ASSERT(info.supports && info.create, "backend '{}' registered without supports/create",
                      info.name);
  for (const BackendInfo& b : r.backends)
    HIR_CHECK(b.name != info.name, "a backend named '{}' is already registered", info.name);
  r.backends.push_back(std::move(info));
}

const std::vector<BackendInfo>& registeredBackends() {
  Registry& r = registry();
  registerBuiltins(r);
  return r.backends;
}

const BackendInfo* findBackend(std::string_view name) {
  for (const BackendInfo& b : registeredBackends())
    if (b.name == name) return &b;
  return nullptr;
}

const BackendInfo& selectBackend(std::string_view requested, const SupportQuery& q,
                                 std::string_view path) {
  const std::vector<BackendInfo>& all = registeredBackends();
  if (requested != "auto") {
    const BackendInfo* b = findBackend(requested);
    if (b == nullptr) {
      std::string names;
      for (const BackendInfo& info : all)
        names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", info.name);
      throw ProgramError(fmt::format("{}unknown backend '{}'; expected \"auto\" or a registered "
                                     "backend: {}",
                                     prefix(path), requested, names));
    }
    Support s = b->supports(q);
    HIR_CHECK(s.ok, "{}backend '{}' cannot run {}: {}", prefix(path), b->name, describeQuery(q),
              s.why);
    return *b;
  }
  const BackendInfo* best = nullptr;
  std::string reasons;
  for (const BackendInfo& b : all) {
    Support s = b.supports(q);
    if (!s.ok) {
      reasons += fmt::format("; {}: {}", b.name, s.why);
      continue;
    }
    // Ties keep the first registered.
    if (best == nullptr || b.auto_priority > best->auto_priority) best = &b;
  }
  HIR_CHECK(best != nullptr, "{}no backend can run {}{}", prefix(path), describeQuery(q),
            all.empty() ? std::string("; no backend is registered") : reasons);
  return *best;
}

}  // namespace hir
