// The exchange tables of the ipc backend's share_mem_handles (internal to
// backends/): each rank's table (an error text and its (slot, handle)
// entries) goes to every rank through two allgathers of the bootstrap, and
// a last allgather of status texts makes every rank fail alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/bootstrap.h>

namespace hir::ipc {

// One rank's exchange table: [error][entries: slot, block bytes, handle
// bytes], each field length-prefixed.
class TableWriter {
 public:
  void i64(int64_t v) { raw(&v, sizeof v); }
  void blob(const void* p, std::size_t n) {
    i64(static_cast<int64_t>(n));
    raw(p, n);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<uint8_t> bytes_;
};

// A block a rank offers: its handle, and its size, which bounds what a
// peer may copy into or out of it.
struct Offer {
  std::vector<uint8_t> handle;
  std::size_t bytes = 0;
};

struct Table {
  std::string error;                    // this rank's problem, or empty
  std::map<int64_t, Offer> handles;     // slot (kPageSlot: page) -> its offer
};

// Two allgathers: the sizes, then the tables padded to the largest.
std::vector<Table> allgatherTables(Bootstrap& boot, const std::vector<uint8_t>& mine);

// Every rank's problem (empty: none) through one allgather of fixed-size
// texts, so that every rank fails alike instead of some waiting forever.
std::vector<std::string> allgatherStatus(Bootstrap& boot, const std::string& mine);

// Throws RuntimeError naming every rank whose problem is not empty.
void throwIfAnyFailed(const std::vector<std::string>& problems, std::string_view what);

}  // namespace hir::ipc
