// The host device's memory (see host_device.h): memfd-backed allocations,
// refused up front when the process cannot be given them (host_memory.h),
// the check records, and the handles through which another process of the
// node maps an allocation (IPC).
#include "device/host_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/check.h"
#include "device/host_device_impl.h"
#include "device/host_memory.h"

namespace hir {

namespace {

std::string errnoText(int err) { return std::system_category().message(err); }

// Out of memory (or of address space) at a system call: a RuntimeError like
// the refusal before it; anything else is the device's own failure.
[[noreturn]] void throwAllocationFailure(std::size_t size, const char* call, int err) {
  std::string text =
      fmt::format("host allocate of {}: {} failed: {}", describeBytes(size), call, errnoText(err));
  if (err == ENOMEM || err == ENOSPC || err == EFBIG) throw RuntimeError(text);
  throw BackendError(text);
}

}  // namespace

// ----------------------------------------------------------------- memory

std::size_t HostDevice::Impl::untouchedLocked() const {
  std::size_t untouched = 0;
  for (const auto& [p, a] : allocations) {
    struct stat st {};
    if (fstat(a.fd, &st) != 0) continue;
    // A memfd's blocks are the pages it was given (512-byte units).
    const auto given = static_cast<std::size_t>(st.st_blocks) * 512;
    untouched += a.size > given ? a.size - given : 0;
  }
  return untouched;
}

// memfd + MAP_SHARED: another process of the node can map the same pages
// through /proc/<pid>/fd/<fd> (exportMemory/importMemory). Pages are taken
// when first written, so an allocation the machine cannot hold would map
// fine and end in the kernel's out-of-memory kill when filled: it is refused
// first (RuntimeError, host_memory.h says against what).
void* HostDevice::allocate(std::size_t bytes) {
  std::size_t size = std::max<std::size_t>(bytes, 1);  // zero bytes: still unique
  if (size >= kCheckedAllocationBytes) {
    std::vector<MemoryBound> bounds = hostMemoryBounds();
    {
      std::lock_guard lock(impl_->mem_mu);
      reserveUntouched(bounds, impl_->untouchedLocked());
    }
    const std::string problem = hostAllocationProblem(size, bounds);
    if (!problem.empty()) throw RuntimeError(problem);
  }
  int fd = memfd_create("hostir", MFD_CLOEXEC);
  if (fd < 0) throwAllocationFailure(size, "memfd_create", errno);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    throwAllocationFailure(size, "ftruncate", err);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    throwAllocationFailure(size, "mmap", err);
  }
  std::lock_guard lock(impl_->mem_mu);
  impl_->allocations[p] = {fd, size};
  return p;
}

void HostDevice::deallocate(void* p) {
  if (p == nullptr) return;
  impl_->waitForAllStreams("deallocate");
  std::lock_guard lock(impl_->mem_mu);
  auto it = impl_->allocations.find(p);
  HIR_CHECK_AS(BackendError, it != impl_->allocations.end(),
               "host deallocate: {} is not a live allocation of this device", p);
  munmap(p, it->second.size);
  close(it->second.fd);
  impl_->allocations.erase(it);
}

CheckRecord* HostDevice::allocateCheckRecords(std::size_t n) {
  // new[] runs CheckRecord's initializers: zeros, first_execution = -1.
  auto* records = new CheckRecord[std::max<std::size_t>(n, 1)];
  std::lock_guard lock(impl_->mem_mu);
  impl_->check_records.insert(records);
  return records;
}

void HostDevice::freeCheckRecords(CheckRecord* p) {
  if (p == nullptr) return;
  impl_->waitForAllStreams("freeCheckRecords");
  std::lock_guard lock(impl_->mem_mu);
  HIR_CHECK_AS(BackendError, impl_->check_records.erase(p) == 1,
               "host freeCheckRecords: {} was not allocated by this device",
               static_cast<void*>(p));
  delete[] p;
}

// -------------------------------------------------------------------- IPC

namespace {

// What a handle carries: the exporter's pid and fd, and the mapped size.
struct WireHandle {
  char magic[8] = {'h', 'i', 'r', 'h', 'o', 's', 't', '1'};
  int64_t pid = 0;
  int64_t fd = 0;
  uint64_t size = 0;
};
constexpr char kHandleMagic[8] = {'h', 'i', 'r', 'h', 'o', 's', 't', '1'};

}  // namespace

MemoryHandle HostDevice::exportMemory(void* p) {
  WireHandle w;
  {
    std::lock_guard lock(impl_->mem_mu);
    auto it = impl_->allocations.find(p);
    HIR_CHECK_AS(BackendError, it != impl_->allocations.end(),
                 "host exportMemory: {} is not the start of an allocation of this device "
                 "(only memory from allocate() can be shared)",
                 p);
    w.pid = getpid();
    w.fd = it->second.fd;
    w.size = it->second.size;
  }
  MemoryHandle h;
  h.bytes.resize(sizeof(WireHandle));
  std::memcpy(h.bytes.data(), &w, sizeof w);
  return h;
}

void* HostDevice::importMemory(const MemoryHandle& h) {
  WireHandle w;
  HIR_CHECK_AS(BackendError,
               h.bytes.size() == sizeof w &&
                   std::memcmp(h.bytes.data(), kHandleMagic, sizeof kHandleMagic) == 0,
               "host importMemory: not a host device memory handle ({} bytes)", h.bytes.size());
  std::memcpy(&w, h.bytes.data(), sizeof w);
  std::string path = fmt::format("/proc/{}/fd/{}", w.pid, w.fd);
  // The fd number could have been reused for another file if the exporter
  // freed the block: make sure it is still one of our memfds.
  char target[256] = {};
  ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
  HIR_CHECK_AS(BackendError, n >= 0,
               "host importMemory: cannot read {}: {} (the exporting process {} must be alive, "
               "on this node and run by the same user)",
               path, errnoText(errno), w.pid);
  HIR_CHECK_AS(BackendError, std::string_view(target).starts_with("/memfd:hostir"),
               "host importMemory: {} is {}, not a hostir allocation (freed by process {}?)",
               path, target, w.pid);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  HIR_CHECK_AS(BackendError, fd >= 0, "host importMemory: cannot open {}: {}", path,
               errnoText(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < w.size) {
    close(fd);
    throw BackendError(fmt::format("host importMemory: {} is smaller than the {} bytes exported",
                                   path, w.size));
  }
  void* p = mmap(nullptr, w.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);  // the mapping keeps the memory alive
  HIR_CHECK_AS(BackendError, p != MAP_FAILED, "host importMemory: mmap of {} failed: {}", path,
               errnoText(err));
  std::lock_guard lock(impl_->mem_mu);
  impl_->imported[p] = w.size;
  return p;
}

void HostDevice::closeImported(void* p) {
  impl_->waitForAllStreams("closeImported");
  std::lock_guard lock(impl_->mem_mu);
  auto it = impl_->imported.find(p);
  HIR_CHECK_AS(BackendError, it != impl_->imported.end(),
               "host closeImported: {} was not returned by importMemory", p);
  munmap(p, it->second);
  impl_->imported.erase(it);
}

}  // namespace hir
