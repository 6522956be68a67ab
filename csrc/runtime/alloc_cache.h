// The memory of a plan's allocations on one rank (internal to runtime/).
//
// One block is cached per Allocate node across runs, so every run sees the
// same address (which is what lets peers map it once). A `deallocate` does
// not free: the block stays in its node's cache. When the node allocates
// again, the new user first waits, on the device, for every communication
// and stream that used the block since it was handed out; when the size
// changes, the old block is freed once those users finished on the host (a
// peer-mapped block is kept until teardown instead, since peers may have
// mapped it). Caller buffers bound to inputs and outputs replace the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include <hostir/device.h>

#include "plan/plan.h"
#include "plan/step.h"

namespace hir {

class AllocCache {
 public:
  struct Block {
    Layout layout;                // of the live allocation
    void* ptr = nullptr;          // live pointer (cache or bound)
    bool live = false;
    void* bound = nullptr;        // caller's buffer, if bound
    std::size_t bound_bytes = 0;
    void* cached = nullptr;       // device memory owned by this node's cache
    std::size_t cached_bytes = 0;
    std::vector<int> comm_users;  // comms that used it since it was (re)allocated
    uint32_t stream_mask = 0;     // streams that touched it since then
    // Blocks this node has had: the first allocation and each change of size
    // start a new one. The same on every rank for peer-mapped allocations
    // (the schedule check says so), which makes it an exchange key. A
    // re-bind() to another buffer of the same size is not a new one (peers
    // never map caller buffers).
    uint64_t generation = 0;
    std::size_t generation_bytes = 0;
    uint64_t exchanged_generation = 0;  // at the last exchange that covered it
    bool adopted = false;  // `cached` is a backend's memory (adopt()): never freed here
  };

  // How the earlier users of a block (its comm_users and stream_mask) are
  // waited for: `on_stream` makes the current stream wait for them (device
  // order, the host goes on); `on_host` blocks until they finished (with the
  // run's timeout).
  struct UserWaits {
    std::function<void(const Block&)> on_stream;
    std::function<void(const Block&)> on_host;
  };

  AllocCache(const Plan& plan, Device& dev, UserWaits waits);
  // Frees the cached blocks, unless leak() was called.
  ~AllocCache();
  AllocCache(const AllocCache&) = delete;
  AllocCache& operator=(const AllocCache&) = delete;

  // A caller's buffer for an input or output (UsageError otherwise).
  void bind(std::string_view name, void* data, std::size_t bytes);

  // Runs Allocate `slot` with the scalars of this point of the run, the
  // block then used first by stream `stream`.
  Block& allocate(int slot, const int64_t* scalars, int stream);
  void deallocate(int slot);

  // The span `ref` denotes now, noting that stream `stream` uses the block.
  struct Span {
    Block* block;
    RefSpan ref;  // offset and count in elements, and the referenced shape
    int64_t offset() const { return ref.offset; }
    int64_t count() const { return ref.count; }
    char* data(DType t) const {
      return static_cast<char*>(block->ptr) + ref.offset * static_cast<int64_t>(dtypeSize(t));
    }
  };
  Span resolve(const PlanRef& ref, const int64_t* scalars, int stream);

  Block& operator[](int slot) { return blocks_[slot]; }
  const Block& operator[](int slot) const { return blocks_[slot]; }

  // Gives node `slot` a block of a backend's memory (Backend::
  // allocateSymmetric) of `bytes`, before its first Allocate; the backend
  // frees it, never this cache.
  void adopt(int slot, void* p, std::size_t bytes);

  // The end of a run: every allocation goes back to its cache.
  void endRun();
  // The host saw everything enqueued so far complete: nothing that used a
  // block needs waiting for any more (before and after a graph capture,
  // which may not wait on events from outside it).
  void forgetUsers();
  // After a failure: memory may still be in use by a stuck communication,
  // so it is leaked rather than freed under it.
  void leak();

 private:
  const Plan& plan_;
  Device& dev_;
  UserWaits waits_;
  std::vector<Block> blocks_;
  std::vector<void*> retired_;  // replaced blocks of peer-mapped allocations
};

}  // namespace hir
