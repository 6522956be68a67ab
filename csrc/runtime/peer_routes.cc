#include "runtime/peer_routes.h"

#include <algorithm>
#include <tuple>

#include "common/check.h"
#include "plan/step.h"

namespace hir {

PeerRoutes::PeerRoutes(const Plan& plan, const P2pTrace& trace, int rank)
    : plan_(plan), rank_(rank) {
  const bool any = std::any_of(plan.backends.begin(), plan.backends.end(),
                               [](const PlanBackend& b) { return b.maps_peer_memory; });
  if (!any) return;
  peers_.resize(static_cast<std::size_t>(plan.world));
  collectives_.resize(plan.comms.size());
  truncated_ = trace.truncated;
  for (const auto& [pair, messages] : trace.pairs) {
    const auto [from, to] = pair;
    for (const P2pMessage& m : messages) {
      if (!plan.backends[plan.comms[m.send.comm].backend].maps_peer_memory) continue;
      if (from == rank)
        peers_[to].sends.push_back(
            {m.send.comm, m.send.alloc, m.send.offset, m.recv.alloc, m.recv.offset, m.protocol});
      if (to == rank)
        peers_[from].recvs.push_back(
            {m.recv.comm, m.recv.alloc, m.recv.offset, m.send.alloc, m.send.offset, m.protocol});
    }
  }
  for (std::size_t pc = 0; pc < plan.code.size(); ++pc)
    if (auto* share = std::get_if<instr::Share>(&plan.code[pc].op))
      shares_[static_cast<int>(pc)] = shareSpec(*share, trace);
}

PeerRoutes::ShareSpec PeerRoutes::shareSpec(const instr::Share& in, const P2pTrace& trace) const {
  const std::set<int> listed(in.comms.begin(), in.comms.end());
  std::set<std::array<int, 4>> links;
  // One item per (communication, peer, side, protocol, allocation, peer
  // allocation): a collective's messages with one peer may go both ways.
  // Each item's place in its backend's list.
  std::map<std::tuple<int, int, CommType, Protocol, int, int>, std::size_t> seen;
  ShareSpec spec;
  auto addItem = [&](const P2pEnd& mine, const P2pEnd& theirs, int peer, CommType side,
                     Protocol protocol, std::size_t bytes) {
    const PlanComm& c = plan_.comms[mine.comm];
    std::vector<ShareItem>& items = spec.items[c.backend];
    const auto [at, added] =
        seen.insert({{mine.comm, peer, side, protocol, mine.alloc, theirs.alloc}, items.size()});
    if (!added) {
      ShareItem& known = items[at->second];
      known.largest_message = std::max(known.largest_message, bytes);
      return;
    }
    ShareItem item;
    item.comm = mine.comm;
    item.type = side;
    item.peer = peer;
    item.alloc = mine.alloc;
    item.peer_alloc = theirs.alloc;
    item.protocol = protocol;
    item.name = plan_.allocs[mine.alloc].name.c_str();
    item.largest_message = bytes;
    items.push_back(item);
  };
  for (const auto& [pair, messages] : trace.pairs) {
    const auto [from, to] = pair;
    for (const P2pMessage& m : messages) {
      if (!plan_.backends[plan_.comms[m.send.comm].backend].maps_peer_memory) continue;
      if (!listed.count(m.send.comm) && !listed.count(m.recv.comm)) continue;
      links.insert({from, to, m.send.alloc, m.recv.alloc});
      if (from == rank_) addItem(m.send, m.recv, to, CommType::Send, m.protocol, m.bytes);
      if (to == rank_) addItem(m.recv, m.send, from, CommType::Recv, m.protocol, m.bytes);
    }
  }
  spec.links.assign(links.begin(), links.end());
  return spec;
}

PostArgs::PeerEnd PeerRoutes::next(int slot, int peer, bool send, int alloc, std::size_t offset,
                                   const AllocCache& allocs, Protocol* protocol) {
  ToPeer& r = peers_[peer];
  const std::vector<Route>& list = send ? r.sends : r.recvs;
  uint64_t& posted = send ? r.sent : r.received;
  const uint64_t seq = posted + 1;
  const bool traced = !list.empty() && (!truncated_ || seq <= list.size());
  HIR_CHECK(traced,
            "{} rank {} is message #{} of this rank {} rank {}, but the load-time dry run "
            "traced {}{}; backend '{}' needs the peer's address of every message from it",
            send ? "send to" : "recv from", peer, seq, send ? "to" : "from", peer, list.size(),
            truncated_ ? " (it stopped early: the plan runs too long)" : "",
            plan_.backends[plan_.comms[slot].backend].name);
  const Route& route = list[(seq - 1) % list.size()];
  HIR_CHECK(route.comm == slot && route.alloc == alloc && route.offset == offset,
            "message #{} {} rank {} is not the one the load-time dry run traced (a run that "
            "failed part-way leaves the message numbers out of step; create a new evaluator)",
            seq, send ? "to" : "from", peer);
  // Both ends' blocks, checked on both ranks, so that both fail alike.
  for (int a : {alloc, route.remote_alloc}) {
    const AllocCache::Block& block = allocs[a];
    HIR_CHECK(block.exchanged_generation == block.generation,
              "'{}' got new memory (it was {}) after the last share_mem_handles that covered "
              "it; a share_mem_handles listing this communication must run after the "
              "allocation",
              plan_.allocs[a].name,
              block.exchanged_generation == 0 ? "never exchanged" : "allocated with another size");
  }
  posted = seq;
  if (protocol != nullptr) *protocol = route.protocol;
  return {route.remote_alloc, route.remote_offset, seq};
}

void PeerRoutes::fill(PostArgs& p, int slot, const AllocCache& allocs) {
  const bool send = p.type == CommType::Send;
  p.remote = next(slot, p.peer, send, send ? p.input_alloc : p.output_alloc,
                  send ? p.input_offset : p.output_offset, allocs, &p.protocol);
}

void PeerRoutes::fillCollective(PostArgs& p, int slot, const AllocCache& allocs) {
  const PlanComm& c = plan_.comms[slot];
  const PlanTeam& team = plan_.teams[c.team];
  const CollectiveShape shape =
      collectiveShape(c, team, rank_, p.dtype, p.count, p.root,
                      p.input_alloc == p.output_alloc && p.input_offset == p.output_offset);
  Collective& cached = collectives_[slot];
  // The messages depend on the shape alone: listed again only when it changed.
  if (!cached.listed || cached.shape != shape) {
    plan_.backends[c.backend].collectiveMessages(shape, cached.messages);
    cached.pieces.resize(cached.messages.size());
    cached.shape = shape;
    cached.listed = true;
  }
  const std::size_t size = dtypeSize(p.dtype);
  for (std::size_t k = 0; k < cached.messages.size(); ++k) {
    const CollectiveMessage& m = cached.messages[k];
    CollectivePiece& piece = cached.pieces[k];
    const bool send = m.from == shape.me;
    piece.message = m;
    piece.peer_rank = team.ranks[send ? m.to : m.from];
    const bool from_input = send && !m.from_output;
    const std::size_t offset = (from_input ? p.input_offset : p.output_offset) +
                               (send ? m.from_offset : m.to_offset) * size;
    piece.peer = next(slot, piece.peer_rank, send, from_input ? p.input_alloc : p.output_alloc,
                      offset, allocs);
  }
  p.pieces = cached.pieces;
}

std::vector<PeerRoutes::Key> PeerRoutes::keysOf(const ShareSpec& spec,
                                                const AllocCache& allocs) const {
  std::vector<Key> keys;
  for (const auto& [from, to, send_alloc, recv_alloc] : spec.links)
    keys.push_back({static_cast<uint64_t>(from), static_cast<uint64_t>(to),
                    static_cast<uint64_t>(send_alloc), static_cast<uint64_t>(recv_alloc),
                    allocs[send_alloc].generation, allocs[recv_alloc].generation});
  return keys;
}

std::map<int, std::vector<ShareItem>> PeerRoutes::exchangeAt(int pc,
                                                             const AllocCache& allocs) const {
  std::map<int, std::vector<ShareItem>> out;
  auto it = shares_.find(pc);
  if (it == shares_.end()) return out;
  const ShareSpec& spec = it->second;
  const std::vector<Key> keys = keysOf(spec, allocs);
  if (std::all_of(keys.begin(), keys.end(), [&](const Key& k) { return exchanged_.count(k); }))
    return out;
  // Every backend that maps peer memory takes part, also with no items of
  // its own: the exchange is collective.
  for (std::size_t b = 0; b < plan_.backends.size(); ++b) {
    if (!plan_.backends[b].maps_peer_memory) continue;
    auto items = spec.items.find(static_cast<int>(b));
    std::vector<ShareItem>& mine = out[static_cast<int>(b)];
    if (items != spec.items.end()) mine = items->second;
    for (ShareItem& item : mine) {
      const AllocCache::Block& a = allocs[item.alloc];
      item.caller_owned = a.bound != nullptr;
      item.base = a.bound ? a.bound : a.cached;
      item.bytes = a.bound ? a.bound_bytes : a.cached_bytes;
    }
  }
  return out;
}

void PeerRoutes::exchanged(int pc, AllocCache& allocs) {
  const ShareSpec& spec = shares_.at(pc);
  for (const Key& k : keysOf(spec, allocs)) exchanged_.insert(k);
  for (const auto& link : spec.links)
    for (int slot : {link[2], link[3]}) allocs[slot].exchanged_generation = allocs[slot].generation;
}

}  // namespace hir
