#include <hostir/device.h>
#include <hostir/settings.h>

#include <mutex>

#include "common/check.h"
#include "device/host_device.h"
#ifdef HIR_WITH_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace hir {

// ------------------------------------------------- optional-part defaults

namespace {
[[noreturn]] void throwUnsupported(const Device& d, std::string_view feature,
                                   std::string_view call) {
  throw BackendError(fmt::format("device '{}' does not support {} ({} called)", d.kind(),
                                 feature, call));
}
}  // namespace

MemoryHandle Device::exportMemory(void*) { throwUnsupported(*this, "ipc", "exportMemory"); }
void* Device::importMemory(const MemoryHandle&) {
  throwUnsupported(*this, "ipc", "importMemory");
}
void Device::closeImported(void*) { throwUnsupported(*this, "ipc", "closeImported"); }
void Device::writeValue(Stream&, uint32_t*, uint32_t) {
  throwUnsupported(*this, "stream semaphores", "writeValue");
}
void Device::waitValue(Stream&, const uint32_t*, uint32_t) {
  throwUnsupported(*this, "stream semaphores", "waitValue");
}
void Device::matmul(Stream&, const MatmulArgs&) { throwUnsupported(*this, "compute", "matmul"); }
void Device::add(Stream&, void*, const void*, const void*, DType, std::size_t) {
  throwUnsupported(*this, "compute", "add");
}
void Device::unary(Stream&, const UnaryArgs&) { throwUnsupported(*this, "compute", "unary"); }
void Device::fillRandom(Stream&, void*, DType, std::size_t, const RandomPattern&) {
  throwUnsupported(*this, "compute", "fillRandom");
}
void Device::checkAgainst(Stream&, const void*, DType, const void*, DType, std::size_t, Tolerance,
                          CheckRecord*, int64_t) {
  throwUnsupported(*this, "compute", "checkAgainst");
}
void Device::reduce(Stream&, void*, const void* const*, std::size_t, DType, ReduceOp,
                    std::size_t) {
  throwUnsupported(*this, "reduce", "reduce");
}
DeviceMessages* Device::messages() { return nullptr; }
void* Device::nativeStream(Stream&) { return nullptr; }
void Device::cancel(std::string_view) {}
std::unique_ptr<Event> Device::createTimingEvent() {
  throwUnsupported(*this, "timing", "createTimingEvent");
}
double Device::elapsedMs(Event&, Event&) { throwUnsupported(*this, "timing", "elapsedMs"); }
void Device::beginCapture(Stream&) { throwUnsupported(*this, "graphs", "beginCapture"); }
std::unique_ptr<Graph> Device::endCapture(Stream&) {
  throwUnsupported(*this, "graphs", "endCapture");
}
void Device::launchGraph(Graph&, Stream&) { throwUnsupported(*this, "graphs", "launchGraph"); }

// ---------------------------------------------------------------- registry

namespace {

struct Registry {
  // Recursive: registering the built-in devices happens under the lock, and
  // each built-in registers itself through registerDevice().
  std::recursive_mutex mutex;
  bool builtins_registered = false;
  std::vector<DeviceInfo> devices;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Called with the registry lock held.
void ensureBuiltins(Registry& r) {
  if (r.builtins_registered) return;
  r.builtins_registered = true;
  registerHostDevice();
#ifdef HIR_WITH_CUDA
  registerCudaDevice();
#endif
}

const DeviceInfo* findDevice(const std::vector<DeviceInfo>& devices, std::string_view name) {
  for (const auto& d : devices)
    if (d.name == name) return &d;
  return nullptr;
}

std::string knownDeviceNames(const std::vector<DeviceInfo>& devices) {
  std::string out = "\"auto\"";
  for (const auto& d : devices) out += fmt::format(", \"{}\"", d.name);
  return out;
}

}  // namespace

void registerDevice(DeviceInfo info) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  ensureBuiltins(r);
  HIR_CHECK_AS(UsageError, !info.name.empty() && info.name != "auto",
               "registerDevice: invalid device name \"{}\"", info.name);
  HIR_CHECK_AS(UsageError, findDevice(r.devices, info.name) == nullptr,
               "registerDevice: a device named \"{}\" is already registered", info.name);
  HIR_INTERNAL_ASSERT(info.available && info.create,
                      "registerDevice: device \"{}\" lacks available() or create()", info.name);
  r.devices.push_back(std::move(info));
}

// Registration is meant to happen at start-up; the returned list is not
// protected against a concurrent registerDevice().
const std::vector<DeviceInfo>& registeredDevices() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  ensureBuiltins(r);
  return r.devices;
}

namespace {
std::unique_ptr<Device> create(const DeviceInfo& info, int index, const Settings& settings) {
  std::unique_ptr<Device> device = info.create(index, settings);
  HIR_INTERNAL_ASSERT(device != nullptr, "device factory \"{}\" returned null", info.name);
  return device;
}
}  // namespace

std::unique_ptr<Device> createDevice(std::string_view name, int index) {
  return createDevice(name, index, Settings::fromEnvironment());
}

std::unique_ptr<Device> createDevice(std::string_view name, int index, const Settings& settings) {
  const std::vector<DeviceInfo>& devices = registeredDevices();
  if (name == "auto") {
    std::string reasons;
    for (std::string_view candidate : {"cuda", "host"}) {
      const DeviceInfo* info = findDevice(devices, candidate);
      if (!info) continue;
      std::string why;
      if (info->available(&why)) return create(*info, index, settings);
      reasons += fmt::format("; {}: {}", candidate, why);
    }
    throw UsageError(fmt::format("--device auto: no device is available{}", reasons));
  }
  const DeviceInfo* info = findDevice(devices, name);
  HIR_CHECK_AS(UsageError, info != nullptr || name != "cuda",
               "--device cuda: not available: this build of hostir has no cuda device (it was "
               "configured without CUDA); known devices: {}",
               knownDeviceNames(devices));
  HIR_CHECK_AS(UsageError, info != nullptr, "--device {}: unknown device; known devices: {}",
               name, knownDeviceNames(devices));
  std::string why;
  HIR_CHECK_AS(UsageError, info->available(&why), "--device {}: not available: {}", name,
               why.empty() ? "no reason given" : why);
  return create(*info, index, settings);
}

}  // namespace hir
