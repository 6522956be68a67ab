#include "device/host_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

namespace hir {

namespace {

constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

// Saturating a - b and a + b.
std::size_t minus(std::size_t a, std::size_t b) { return a > b ? a - b : 0; }
std::size_t plus(std::size_t a, std::size_t b) { return a > kMax - b ? kMax : a + b; }

// A "Key:   123 kB" line of /proc/meminfo or /proc/self/status, in bytes.
bool readKb(const std::string& path, std::string_view key, std::size_t& bytes) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() <= key.size() || line.compare(0, key.size(), key) != 0 ||
        line[key.size()] != ':')
      continue;
    char* end = nullptr;
    errno = 0;
    unsigned long long kb = std::strtoull(line.c_str() + key.size() + 1, &end, 10);
    if (errno != 0 || end == line.c_str() + key.size() + 1) return false;
    bytes = kb > kMax / 1024 ? kMax : static_cast<std::size_t>(kb) * 1024;
    return true;
  }
  return false;
}

// The first number of a file ("max" or anything else: false).
bool readNumber(const std::string& path, std::size_t& value) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text[0] < '0' || text[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  value = static_cast<std::size_t>(std::min<unsigned long long>(v, kMax));
  return true;
}

// The cgroup v2 folder of this process ("0::/path" in /proc/self/cgroup).
std::string cgroupV2Dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string dir = "/sys/fs/cgroup" + line.substr(3);
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir;
  }
  return "";
}

void addCgroupBounds(std::vector<MemoryBound>& out) {
  // v2: this cgroup and its ancestors up to the root each may set a limit.
  std::string dir = cgroupV2Dir();
  while (dir.rfind("/sys/fs/cgroup", 0) == 0) {
    std::size_t max = 0, current = 0;
    if (readNumber(dir + "/memory.max", max) && readNumber(dir + "/memory.current", current))
      out.push_back({minus(max, current),
                     fmt::format("the cgroup limit {}/memory.max ({}) less its use", dir,
                                 describeBytes(max))});
    if (dir == "/sys/fs/cgroup") break;
    dir.erase(dir.rfind('/'));
  }
  // v1: the memory controller's root as a container sees it. "Unlimited" is
  // a number near 2^63, which then never is the tightest bound.
  std::size_t limit = 0, usage = 0;
  if (readNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes", limit) &&
      readNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes", usage) &&
      limit < (std::size_t{1} << 62))
    out.push_back({minus(limit, usage),
                   fmt::format("the cgroup limit memory.limit_in_bytes ({}) less its use",
                               describeBytes(limit))});
}

}  // namespace

std::string describeBytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{} bytes ({:.3g} {})", bytes, v, kUnits[unit]);
}

std::size_t mappedBytes() {
  std::size_t mapped = 0;
  readKb("/proc/self/status", "VmSize", mapped);
  return mapped;
}

std::vector<MemoryBound> hostMemoryBounds() {
  std::vector<MemoryBound> out;
  std::size_t available = 0, swap_free = 0;
  if (readKb("/proc/meminfo", "MemAvailable", available)) {
    readKb("/proc/meminfo", "SwapFree", swap_free);
    out.push_back({plus(available, swap_free), "MemAvailable + SwapFree in /proc/meminfo"});
  }
  addCgroupBounds(out);
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    out.push_back({minus(static_cast<std::size_t>(as.rlim_cur), mappedBytes()),
                   fmt::format("the address-space limit RLIMIT_AS (ulimit -v: {}) less what "
                               "this process has mapped",
                               describeBytes(static_cast<std::size_t>(as.rlim_cur))),
                   /*pages=*/false});
  }
  return out;
}

void reserveUntouched(std::vector<MemoryBound>& bounds, std::size_t untouched) {
  if (untouched == 0) return;
  for (MemoryBound& b : bounds) {
    if (!b.pages) continue;
    b.bytes = minus(b.bytes, untouched);
    b.source += fmt::format(", less {} that earlier allocations of this device have not "
                            "written yet",
                            describeBytes(untouched));
  }
}

std::string hostAllocationProblem(std::size_t bytes, const std::vector<MemoryBound>& bounds) {
  const MemoryBound* tightest = nullptr;
  for (const MemoryBound& b : bounds)
    if (!tightest || b.bytes < tightest->bytes) tightest = &b;
  if (!tightest || bytes <= tightest->bytes) return "";
  return fmt::format("host allocate of {}: more than this process can be given now, at most {} "
                     "({})",
                     describeBytes(bytes), describeBytes(tightest->bytes), tightest->source);
}

}  // namespace hir
