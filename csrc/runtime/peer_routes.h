// Where the peer's end of each message lies, for backends that map peer
// memory (internal to runtime/). From the load-time trace of the dry run
// (compile()), every rank knows, for its k-th message with a peer, the
// peer's allocation and offset: a post needs no exchange at run time. The
// exchanges themselves (share_mem_handles) are decided here too, alike on
// every rank.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include <hostir/backend.h>

#include "plan/plan.h"
#include "plan/trace.h"
#include "runtime/alloc_cache.h"

namespace hir {

class PeerRoutes {
 public:
  // Empty (and never used) when no bound backend maps peer memory.
  PeerRoutes(const Plan& plan, const P2pTrace& trace, int rank);

  // Fills p.remote for this rank's next message with p.peer, posted by
  // communication `slot`, and p.protocol (auto resolved, as the trace
  // says); checks that both ends' blocks were exchanged in
  // their current generation.
  void fill(PostArgs& p, int slot, const AllocCache& allocs);
  // For a collective on a backend that runs collectives as messages
  // (PlanBackend::collective_messages), with p's other fields set: fills
  // p.pieces (storage kept here, per communication, until its next post),
  // one route per message, with the same checks.
  void fillCollective(PostArgs& p, int slot, const AllocCache& allocs);

  // What the Share instruction at `pc` exchanges, per backend that maps
  // peer memory: this rank's items, with the current blocks. Empty when
  // every link it covers was already exchanged with these blocks (then no
  // rank exchanges: all decide alike). After the exchange, call
  // exchanged(pc).
  std::map<int, std::vector<ShareItem>> exchangeAt(int pc, const AllocCache& allocs) const;
  void exchanged(int pc, AllocCache& allocs);

 private:
  struct Route {
    int comm = -1, alloc = -1;
    std::size_t offset = 0;
    int remote_alloc = -1;
    std::size_t remote_offset = 0;
    Protocol protocol = Protocol::Put;  // both ends', auto resolved
  };
  struct ToPeer {
    std::vector<Route> sends, recvs;  // one run's messages to / from the peer
    uint64_t sent = 0, received = 0;  // posted so far, over every run
  };
  // What one share_mem_handles instruction exchanges. A link is (from, to,
  // send allocation, recv allocation) of messages of the listed
  // communications, over every rank: all ranks compute the same links, and,
  // because peer-mapped allocations happen in the same order everywhere (the
  // schedule check says so), the same block generations.
  struct ShareSpec {
    std::vector<std::array<int, 4>> links;
    std::map<int, std::vector<ShareItem>> items;  // backend -> this rank's items
  };
  using Key = std::array<uint64_t, 6>;  // a link with both block generations

  // A collective's messages as last listed, and their pieces.
  struct Collective {
    bool listed = false;
    CollectiveShape shape;
    std::vector<CollectiveMessage> messages;
    std::vector<CollectivePiece> pieces;
  };

  // The route of this rank's next message with `peer` in one direction,
  // checked against what the trace says (this end's allocation and offset)
  // and against stale exchanges.
  PostArgs::PeerEnd next(int slot, int peer, bool send, int alloc, std::size_t offset,
                         const AllocCache& allocs, Protocol* protocol = nullptr);
  ShareSpec shareSpec(const instr::Share& in, const P2pTrace& trace) const;
  std::vector<Key> keysOf(const ShareSpec& spec, const AllocCache& allocs) const;

  const Plan& plan_;
  int rank_;
  std::vector<ToPeer> peers_;  // per world rank
  bool truncated_ = false;
  std::map<int, ShareSpec> shares_;  // by pc of the Share instruction
  std::vector<Collective> collectives_;  // per communication slot
  std::set<Key> exchanged_;
};

}  // namespace hir
