// The point-to-point messages of one run of a plan, matched send to recv
// across ranks: what the cross-rank dry run (analysis/schedule_check.h)
// produces and what backends that map peer memory need at post time (the
// peer's address of every message), through runtime/peer_routes.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <hostir/types.h>

namespace hir {

// One end of a point-to-point message, as the dry run resolved it.
struct P2pEnd {
  int comm = -1;           // communication slot
  int alloc = -1;          // allocation slot
  std::size_t offset = 0;  // bytes from the start of the allocation
};

// A send matched with its recv.
struct P2pMessage {
  P2pEnd send, recv;
  std::size_t bytes = 0;
  Protocol protocol = Protocol::Put;  // as the send says, auto resolved (PlanBackend::protocolFor)
  int backend = -1;                   // as the send says (Plan::backends)
};

// Every matched send/recv of one run, per ordered pair of ranks (from, to),
// in the order the pair's messages match. A run of the plan repeats it
// exactly: the plan is deterministic given the rank. Backends that map a
// peer's memory (ipc) use it to know, at post time, the peer's address.
struct P2pTrace {
  bool truncated = false;  // the dry run stopped early: only a prefix is known
  std::map<std::pair<int, int>, std::vector<P2pMessage>> pairs;
};

// The largest message of `trace` that backend slot `backend` carries with
// protocol eager, in bytes (0: none), or -1 when the trace is of a prefix
// of the run only: BackendContext::largest_eager_send.
inline int64_t largestEagerSend(const P2pTrace& trace, int backend) {
  if (trace.truncated) return -1;
  std::size_t largest = 0;
  for (const auto& [pair, messages] : trace.pairs)
    for (const P2pMessage& m : messages)
      if (m.backend == backend && m.protocol == Protocol::Eager && m.bytes > largest)
        largest = m.bytes;
  return static_cast<int64_t>(largest);
}

}  // namespace hir
