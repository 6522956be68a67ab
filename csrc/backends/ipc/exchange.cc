#include "backends/ipc/exchange.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace hir::ipc {

namespace {

class TableReader {
 public:
  TableReader(const uint8_t* p, std::size_t n, int rank) : p_(p), n_(n), rank_(rank) {}
  int64_t i64() {
    int64_t v = 0;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::vector<uint8_t> blob() {
    const int64_t n = i64();
    HIR_INTERNAL_ASSERT(n >= 0, "ipc: rank {}'s exchange table has a negative length", rank_);
    const uint8_t* p = take(static_cast<std::size_t>(n));
    return {p, p + n};
  }

 private:
  const uint8_t* take(std::size_t n) {
    HIR_INTERNAL_ASSERT(at_ + n <= n_, "ipc: rank {}'s exchange table is truncated", rank_);
    const uint8_t* p = p_ + at_;
    at_ += n;
    return p;
  }
  const uint8_t* p_;
  std::size_t n_, at_ = 0;
  int rank_;
};

}  // namespace


std::vector<Table> allgatherTables(Bootstrap& boot, const std::vector<uint8_t>& mine) {
  const int world = boot.world();
  const uint64_t size = mine.size();
  std::vector<uint64_t> sizes(static_cast<std::size_t>(world));
  boot.allgather(&size, sizes.data(), sizeof size);
  const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<uint8_t> send(longest), all(longest * static_cast<uint64_t>(world));
  std::copy(mine.begin(), mine.end(), send.begin());
  boot.allgather(send.data(), all.data(), longest);
  std::vector<Table> out(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    TableReader in(all.data() + longest * r, sizes[r], r);
    std::vector<uint8_t> error = in.blob();
    out[r].error.assign(error.begin(), error.end());
    for (int64_t n = in.i64(); n > 0; --n) {
      const int64_t slot = in.i64();
      Offer& offer = out[r].handles[slot];
      offer.bytes = static_cast<std::size_t>(in.i64());
      offer.handle = in.blob();
    }
  }
  return out;
}

// The length of a status text, its terminating zero included.
constexpr std::size_t kStatusBytes = 1024;

std::vector<std::string> allgatherStatus(Bootstrap& boot, const std::string& mine) {
  std::vector<char> send(kStatusBytes, '\0');
  std::copy_n(mine.begin(), std::min(mine.size(), kStatusBytes - 1), send.begin());
  std::vector<char> all(kStatusBytes * static_cast<std::size_t>(boot.world()));
  boot.allgather(send.data(), all.data(), kStatusBytes);
  std::vector<std::string> out;
  for (int r = 0; r < boot.world(); ++r) out.emplace_back(all.data() + kStatusBytes * r);
  return out;
}

void throwIfAnyFailed(const std::vector<std::string>& problems, std::string_view what) {
  std::string failures;
  int failed = 0;
  for (std::size_t r = 0; r < problems.size(); ++r) {
    if (problems[r].empty()) continue;
    failures += fmt::format("{}rank {}: {}", failed ? "; " : "", r, problems[r]);
    ++failed;
  }
  HIR_RUNTIME_CHECK(failed == 0, "ipc: share_mem_handles failed on {} rank{} ({}): {}", failed,
                    failed == 1 ? "" : "s", what, failures);
}

}  // namespace hir::ipc
