#include "runtime/alloc_cache.h"

#include "common/buffer_ranges.h"
#include "common/check.h"

namespace hir {

AllocCache::AllocCache(const Plan& plan, Device& dev, UserWaits waits)
    : plan_(plan), dev_(dev), waits_(std::move(waits)), blocks_(plan.allocs.size()) {}

AllocCache::~AllocCache() {
  // A destructor must not throw: after a device failure (sticky error)
  // teardown calls fail too, and the error that matters was reported.
  auto quietly = [](auto&& fn) {
    try {
      fn();
    } catch (const std::exception&) {
    }
  };
  for (Block& b : blocks_)
    if (b.cached && !b.adopted) quietly([&] { dev_.deallocate(b.cached); });
  for (void* p : retired_) quietly([&] { dev_.deallocate(p); });
}

void AllocCache::leak() {
  for (Block& b : blocks_) b.cached = nullptr;
  retired_.clear();
}

void AllocCache::bind(std::string_view name, void* data, std::size_t bytes) {
  for (std::size_t i = 0; i < plan_.allocs.size(); ++i) {
    if (plan_.allocs[i].name != name) continue;
    HIR_CHECK_AS(UsageError, plan_.allocs[i].bindable,
                 "bind('{}'): '{}' is not listed in the program's inputs or outputs", name, name);
    HIR_CHECK_AS(UsageError, data != nullptr || bytes == 0, "bind('{}'): null buffer", name);
    // Two allocations in one memory write through each other, which the
    // hazard check, reasoning per allocation, cannot see.
    for (std::size_t j = 0; j < blocks_.size(); ++j) {
      const Block& other = blocks_[j];
      HIR_CHECK_AS(UsageError, j == i || !overlaps(data, bytes, other.bound, other.bound_bytes),
                   "bind('{}'): its buffer ({} bytes at {}) overlaps the one bound to '{}' ({} "
                   "bytes at {}); two allocations in one memory would write through each "
                   "other: bind each its own buffer",
                   name, bytes, data, plan_.allocs[j].name, other.bound_bytes, other.bound);
    }
    blocks_[i].bound = data;
    blocks_[i].bound_bytes = bytes;
    return;
  }
  throw UsageError(
      fmt::format("bind('{}'): the program has no allocation named '{}'", name, name));
}

AllocCache::Block& AllocCache::allocate(int slot, const int64_t* scalars, int stream) {
  Block& a = blocks_[slot];
  const PlanAlloc& pa = plan_.allocs[slot];
  HIR_CHECK(!a.live, "'{}' is allocated again without a deallocate", pa.name);
  evalLayout(pa, scalars, a.layout);
  const std::size_t bytes = a.layout.bytes;
  if (a.generation == 0 || a.generation_bytes != bytes) {
    ++a.generation;
    a.generation_bytes = bytes;
  }
  if (a.bound) {
    HIR_CHECK(a.bound_bytes >= bytes, "'{}' needs {} bytes but the buffer bound to it holds {}",
              pa.name, bytes, a.bound_bytes);
    a.ptr = a.bound;
  } else {
    if (a.cached && a.cached_bytes != bytes) {
      // The shape changed: the old block goes once nothing uses it.
      waits_.on_host(a);
      // Peers may have mapped a peer-mapped block: it lives until teardown.
      // An adopted one is its backend's to free.
      if (pa.peer_mapped)
        retired_.push_back(a.cached);
      else if (!a.adopted)
        dev_.deallocate(a.cached);
      a.cached = nullptr;
      a.adopted = false;
      a.comm_users.clear();
      a.stream_mask = 0;
    }
    if (!a.cached) {
      try {
        a.cached = dev_.allocate(bytes);
      } catch (const RuntimeError& e) {
        // The device says how much it could give; the user needs to know for what.
        throw RuntimeError(fmt::format("'{}': {}", pa.name, e.what()));
      }
      a.cached_bytes = bytes;
    }
    a.ptr = a.cached;
  }
  // Reusing a block: the new user first waits for every earlier one,
  // without blocking the host.
  waits_.on_stream(a);
  a.comm_users.clear();
  a.stream_mask = 1u << stream;
  a.live = true;
  return a;
}

void AllocCache::deallocate(int slot) {
  Block& a = blocks_[slot];
  HIR_CHECK(a.live, "'{}' is deallocated but not allocated", plan_.allocs[slot].name);
  // The block stays in this node's cache; pending users are waited for
  // when it is reused (stream order) or freed (host, with timeout).
  a.live = false;
}

AllocCache::Span AllocCache::resolve(const PlanRef& ref, const int64_t* scalars, int stream) {
  Block& a = blocks_[ref.alloc];
  HIR_CHECK(a.live, "'{}' uses '{}', which is not allocated", ref.text,
            plan_.allocs[ref.alloc].name);
  const RefSpan span = resolveRef(ref, a.layout, scalars);
  a.stream_mask |= 1u << stream;
  return Span{&a, span};
}

void AllocCache::endRun() {
  for (Block& b : blocks_) b.live = false;
}

void AllocCache::adopt(int slot, void* p, std::size_t bytes) {
  Block& a = blocks_[slot];
  HIR_INTERNAL_ASSERT(a.cached == nullptr && !a.live, "adopt('{}') after its first allocation",
                      plan_.allocs[slot].name);
  a.cached = p;
  a.cached_bytes = bytes;
  a.adopted = true;
}

void AllocCache::forgetUsers() {
  for (Block& b : blocks_) {
    b.comm_users.clear();
    b.stream_mask = 0;
  }
}

}  // namespace hir
