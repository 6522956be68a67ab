// Default behaviour of Backend, and the registry of backends by name.
#include <hostir/backend.h>

#include <mutex>

#include "backends/ipc/ipc_backend.h"
#include "backends/local_backend.h"
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
  HIR_INTERNAL_ASSERT(items.empty(),
            "backend '{}' does not exchange memory handles, yet share_mem_handles lists {} "
            "item(s) for it",
            name(), items.size());
}

void Backend::abort() {}
void Backend::setCapturing(bool) {}
void* Backend::allocateSymmetric(std::size_t, std::span<const int>) { return nullptr; }

namespace {

struct BackendRegistry {
  // Recursive: registering the built-ins goes through registerBackend().
  std::recursive_mutex mutex;
  std::vector<BackendInfo> backends;
  bool builtins_registered = false;
};

BackendRegistry& backends() {
  static BackendRegistry r;
  return r;
}

// The built-in backends register on first use of the registry, so that a
// program linking the library statically still finds them (no static
// initializers to be dropped by the linker).
void registerBuiltins(BackendRegistry& r) {
  std::lock_guard lock(r.mutex);
  if (r.builtins_registered) return;
  r.builtins_registered = true;  // first: the calls below re-enter the registry
  registerMpiBackend();
#ifdef HIR_WITH_CUDA
  registerNcclBackend();
#endif
  registerIpcBackend();  // cuda and host devices
  registerLocalBackend();  // host device, ranks as threads of one process
}

}  // namespace

void registerBackend(BackendInfo info) {
  BackendRegistry& r = backends();
  std::lock_guard lock(r.mutex);
  registerBuiltins(r);
  HIR_CHECK_AS(UsageError, info.create != nullptr && !info.caps.name.empty(),
               "registerBackend: backend '{}' has no {}", info.caps.name,
               info.caps.name.empty() ? "name" : "create function");
  HIR_CHECK_AS(UsageError, info.caps.name != "auto",
               "registerBackend: \"auto\" is not a backend name; programs use it to let "
               "lowering choose");
  HIR_CHECK_AS(UsageError, !info.caps.rank_spaces.empty(),
               "registerBackend: backend '{}' connects ranks in no rank space (rank_spaces is "
               "empty; leave it as is for both processes and threads)",
               info.caps.name);
  HIR_CHECK_AS(UsageError, info.caps.unavailable.empty(),
               "registerBackend: backend '{}' has caps.unavailable set ('{}'); only a session's "
               "catalog (backendCatalog(bootstrap)) sets it",
               info.caps.name, info.caps.unavailable);
  for (const BackendInfo& b : r.backends)
    HIR_CHECK_AS(UsageError, b.caps.name != info.caps.name,
                 "registerBackend: a backend named '{}' is already registered", info.caps.name);
  r.backends.push_back(std::move(info));
}

const std::vector<BackendInfo>& registeredBackends() {
  BackendRegistry& r = backends();
  registerBuiltins(r);
  return r.backends;
}

const BackendInfo* findBackend(std::string_view name) {
  for (const BackendInfo& b : registeredBackends())
    if (b.caps.name == name) return &b;
  return nullptr;
}

std::vector<BackendCaps> backendCatalog() {
  std::vector<BackendCaps> out;
  BackendRegistry& r = backends();
  std::lock_guard lock(r.mutex);
  registerBuiltins(r);
  for (const BackendInfo& b : r.backends) out.push_back(b.caps);
  return out;
}

namespace {
std::string_view describe(RankSpace s) {
  switch (s) {
    case RankSpace::Processes: return "separate processes";
    case RankSpace::Threads: return "threads of one process";
  }
  HIR_INTERNAL_ASSERT(false, "unknown rank space {}", static_cast<int>(s));
  return "";
}
}  // namespace

std::vector<BackendCaps> backendCatalog(const Bootstrap& bootstrap) {
  return backendCatalog(bootstrap.rankSpace());
}

std::vector<BackendCaps> backendCatalog(RankSpace space) {
  std::vector<BackendCaps> out = backendCatalog();
  for (BackendCaps& c : out) {
    if (c.rank_spaces.has(space)) continue;
    const RankSpace wanted =
        space == RankSpace::Threads ? RankSpace::Processes : RankSpace::Threads;
    c.unavailable = fmt::format(
        "backend '{}' connects ranks that are {}, but this session's bootstrap has its ranks as "
        "{}{}",
        c.name, describe(wanted), describe(space),
        space == RankSpace::Threads
            ? " (createThreadBootstraps, createSelfBootstrap); use backend \"auto\" or \"local\""
            : "; use backend \"auto\", or createThreadBootstraps for ranks as threads");
  }
  return out;
}

}  // namespace hir
