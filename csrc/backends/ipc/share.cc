// The exchange of share_mem_handles (state.h): what this rank offers (its
// signal page, the blocks its peers copy to or from), one batched exchange
// through the bootstrap (exchange.h), and the mapping of what the peers
// offered.
#include <map>
#include <set>

#include "backends/ipc/state.h"
#include "common/log.h"
#include <hostir/bootstrap.h>

namespace hir::ipc {

void State::importPage(int peer, const Table& table) {
  if (peer_pages[peer] != nullptr) return;
  if (peer == rank) {
    peer_pages[peer] = page;
    return;
  }
  auto it = table.handles.find(kPageSlot);
  HIR_INTERNAL_ASSERT(it != table.handles.end(), "ipc: rank {} sent no signal page", peer);
  void* p = nullptr;
  try {
    p = dev->importMemory(MemoryHandle{it->second.handle});
  } catch (const Error& e) {
    throw BackendError(fmt::format("ipc: rank {} cannot map the signal page of rank {}: {}", rank,
                                   peer, e.what()));
  }
  mapped_pages.push_back(p);
  peer_pages[peer] = static_cast<uint32_t*>(p);
}

void State::importBlock(int peer, int slot, const ipc::Offer& offer) {
  const std::vector<uint8_t>& handle = offer.handle;
  std::vector<Import>& of_peer = imports[static_cast<std::size_t>(peer)];
  if (of_peer.size() <= static_cast<std::size_t>(slot))
    of_peer.resize(static_cast<std::size_t>(slot) + 1);
  Import& known = of_peer[static_cast<std::size_t>(slot)];
  if (known.ptr != nullptr && known.handle == handle && known.bytes == offer.bytes)
    return;  // mapped: a no-op
  Import next;
  next.handle = handle;
  next.bytes = offer.bytes;
  if (peer == rank) {
    next.ptr = exports.at(slot).base;
    next.own = true;
  } else {
    try {
      next.ptr = dev->importMemory(MemoryHandle{handle});
    } catch (const Error& e) {
      throw BackendError(fmt::format("ipc: rank {} cannot map allocation #{} of rank {}: {}", rank,
                                     slot, peer, e.what()));
    }
  }
  // The peer has a new block: the old mapping may still serve earlier posts.
  if (known.ptr != nullptr && !known.own) retired.push_back(known.ptr);
  known = std::move(next);
}

std::string State::exportError(const ShareItem& item, const std::string& what) const {
  return fmt::format("'{}' (allocation #{}, {} rank {}): {}", item.name, item.alloc,
                     direction(item.type), item.peer, what);
}

}  // namespace hir::ipc

namespace hir {

using namespace ipc;

void IpcBackend::shareMemHandles(std::span<const ShareItem> items) {
  State& st = *state_;
  HIR_INTERNAL_ASSERT(st.dev != nullptr, "ipc backend exchanged before setup()");
  std::map<int, const ShareItem*> to_export;  // our allocation slot -> an item naming it
  std::set<std::pair<int, int>> to_import;    // (peer, its allocation slot)
  std::set<int> peers;
  std::string error;
  auto problem = [&](const std::string& what) { error += (error.empty() ? "" : "; ") + what; };
  for (const ShareItem& item : items) {
    HIR_INTERNAL_ASSERT(item.peer >= 0 && item.peer < st.world && item.alloc >= 0,
                        "ipc: share item with peer {} and allocation {}", item.peer, item.alloc);
    peers.insert(item.peer);
    if (st.nodes[item.peer] != st.nodes[st.rank])
      problem(fmt::format(
          "{} rank {} on node '{}' from node '{}': {}", direction(item.type), item.peer,
          st.nodes[item.peer], st.nodes[st.rank],
          supports(caps(), SupportQuery{.device = st.dev->kind(), .type = item.type,
                                        .peer_on_other_node = true})
              .why));
    // Eager messages go through the page's slots; their receive buffers are
    // mapped for direct delivery only, when a message is too large for lines
    // (a caller's buffer cannot be mapped: its messages take the slots).
    if (item.protocol == Protocol::Eager &&
        (!st.direct || item.largest_message <= st.inline_max ||
         (item.type == CommType::Recv && item.caller_owned)))
      continue;
    if (item.protocol == Protocol::Eager ? item.type == CommType::Recv
                                         : exportsBuffer(item.type, item.protocol))
      to_export.emplace(item.alloc, &item);
    else
      to_import.insert({item.peer, item.peer_alloc});
  }

  // What we offer: our signal page, and each block a peer copies to or from
  // (exported once per block).
  struct Entry {
    int64_t slot;
    std::size_t bytes;
    const std::vector<uint8_t>* handle;
  };
  std::vector<Entry> entries;
  if (st.page_handle.empty()) {
    try {
      st.page_handle = st.dev->exportMemory(st.page).bytes;
    } catch (const Error& e) {
      problem(fmt::format("cannot export the signal page: {}", e.what()));
    }
  }
  if (!st.page_handle.empty()) entries.push_back({kPageSlot, st.page_bytes, &st.page_handle});
  for (const auto& [slot, item] : to_export) {
    if (item->base == nullptr) continue;  // no memory yet: a later exchange covers it
    if (item->caller_owned) {
      problem(st.exportError(*item,
                             "it is bound to a caller's buffer, which ipc cannot share; "
                             "only memory the evaluator allocates can be mapped by peers"));
      continue;
    }
    State::Export& e = st.exports[slot];
    if (e.base != item->base) {
      try {
        e.handle = st.dev->exportMemory(item->base);
        e.base = item->base;
      } catch (const Error& ex) {
        e = {};
        problem(st.exportError(*item, ex.what()));
        continue;
      }
    }
    entries.push_back({slot, item->bytes, &e.handle.bytes});
  }
  TableWriter out;
  out.blob(error.data(), error.size());
  out.i64(static_cast<int64_t>(entries.size()));
  for (const Entry& e : entries) {
    out.i64(e.slot);
    out.i64(static_cast<int64_t>(e.bytes));
    out.blob(e.handle->data(), e.handle->size());
  }

  Bootstrap& boot = *st.ctx.bootstrap;
  std::vector<Table> tables = allgatherTables(boot, out.bytes());
  ++st.exchanges;
  HIR_LOG_INFO(Subsys::Ipc, "handle exchange {}: offered a table of {} bytes; {} peer(s) to map",
               st.exchanges, out.bytes().size(), peers.size());
  std::vector<std::string> problems;
  for (const Table& t : tables) problems.push_back(t.error);
  throwIfAnyFailed(problems, "offering memory");

  std::string import_error;
  try {
    for (int peer : peers) st.importPage(peer, tables[peer]);
    for (const auto& [peer, slot] : to_import) {
      const auto& handles = tables[peer].handles;
      auto it = handles.find(slot);
      // Not offered: the peer has no memory for it yet (a later exchange
      // covers it) or it was offered before and is already mapped.
      if (it != handles.end()) st.importBlock(peer, slot, it->second);
    }
    for (int peer : peers) {
      st.laneFor(CommType::Send, peer);
      st.laneFor(CommType::Recv, peer);
    }
  } catch (const Error& e) {
    import_error = e.what();
  }
  // Also a barrier: once it returns, every peer has mapped what it needs
  // from us, so a rank may tear down (and free) right after an exchange.
  throwIfAnyFailed(allgatherStatus(boot, import_error), "mapping peer memory");
}

}  // namespace hir
