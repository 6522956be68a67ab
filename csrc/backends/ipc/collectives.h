// Which protocol an ipc send/recv runs (ipcResolveProtocol), and how the
// ipc backend runs collectives: as messages between the members of
// the team, over peer-mapped memory (BackendCaps::collective_messages). The
// list of messages is written once, here, and serves the cross-rank check
// (which matches them with the pairs' sends and recvs and traces their
// addresses), the evaluator (which gives each its peer's end) and the
// backend (which runs them). docs/ipc.md, "Collectives", tells the story.
//
// - allgather, broadcast, alltoall ("copies"): put messages, the sender
//   writes its chunk straight into each receiver's output (the device
//   chooses how: on cuda a kernel up to HIR_CUDA_GRID_COPY_MAX, the copy
//   engine above, where no SM does any of it); the member's own chunk is a
//   local copy.
// - broadcast of a team of 3 or more, from ipcBroadcastSplitMinBytes()
//   ("scatter-allgather"): the root's copies would all leave through the
//   root's links, (T - 1) N bytes; instead each other member gets (reads)
//   its chunk of T - 1 from the root, then puts it into the other
//   members' outputs: N bytes leave the root, (T - 2) N / (T - 1) each
//   other member.
// - reduce_scatter ("one-shot"): get messages, every member reads its chunk
//   of each peer's input and reduces them, its own included, in team order,
//   with one kernel (Device::reduce) into its output.
// - allreduce: "one-shot" as reduce_scatter but over the whole buffer, up to
//   HIR_IPC_ONE_SHOT_MAX bytes (and never in place, where the peers would
//   read what the member overwrites); above it, or in place, "two-shot":
//   member i reduces chunk i of every input into its own output (get), then
//   puts that chunk into every peer's output (put).
// - Small messages (a member's chunk up to ipcEagerMaxBytes()) go eager:
//   "eager copies", and "eager one-shot" for allreduce (in place too) and
//   reduce_scatter, whose reduction reads the peers' chunks from the
//   member's own slots. No message then waits for its receiver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <hostir/backend.h>
#include <hostir/settings.h>

namespace hir {

// The limits below come from the session's settings (<hostir/settings.h>),
// the same on every rank (Evaluator load compares them), so that the
// cross-rank check, the evaluator and the backend decide alike.

// The smallest broadcast, in bytes, that a team of 3 or more runs as
// scatter-allgather instead of copies from the root
// (HIR_IPC_BROADCAST_SPLIT_MIN). Copies from the root take (T - 1) N / B on
// the root's links (B their rate); scatter-allgather N / B +
// (T - 2) N / ((T - 1) B) and one more phase. Chunks small enough to go
// eager stay copies.
std::size_t ipcBroadcastSplitMinBytes(const Settings& settings);

// Team members whose buffers one reduction reads at most (Device::reduce).
inline constexpr int kIpcMaxReduceMembers = 16;
// Team members of any ipc collective at most: the ranks of one node, with
// room. Each member has 2 (T - 1) messages or more, so the cross-rank check
// of a bigger team (hir check --world 4000) would hold T^2 messages.
inline constexpr int kIpcMaxCollectiveMembers = 64;

// The one-shot/two-shot boundary of an allreduce of a team of `members`, in
// bytes: HIR_IPC_ONE_SHOT_MAX, by default kIpcOneShotMaxPair for a team of
// 2 and kIpcOneShotMax for a larger one. One-shot makes each member read
// (T - 1) x N bytes of its peers; two-shot reads and writes 2 (T - 1) N / T
// in two phases. A pair moves as many bytes either way, and one-shot saves
// the second phase and its round trip, until reducing all N on every member
// costs more than that (docs/performance.md, "ipc's defaults").
inline constexpr std::size_t kIpcOneShotMax = std::size_t{256} << 10;
inline constexpr std::size_t kIpcOneShotMaxPair = std::size_t{16} << 20;
std::size_t ipcOneShotMaxBytes(const Settings& settings, int members);

// The eager protocol's limits: a collective's chunk of at most
// ipcEagerMaxBytes() (HIR_IPC_EAGER_MAX; 0 turns eager off, for sends and
// recvs too) goes eager, and each ordered pair of ranks has ipcEagerSlots()
// slots (HIR_IPC_EAGER_SLOTS, a power of two) of at least that size in the
// receiver's signal page.
std::size_t ipcEagerMaxBytes(const Settings& settings);
uint32_t ipcEagerSlots(const Settings& settings);
// A send or recv goes eager (auto's choice) up to ipcEagerSendMaxBytes():
// HIR_IPC_EAGER_SEND_MAX, or ipcEagerMaxBytes() where that is larger; 0
// when ipcEagerMaxBytes() is 0 (eager off). A stream of mid-size messages
// then needs no round trip per message (the slots are credits); the backend
// sizes its slots to the program's largest eager message
// (BackendContext::largest_eager_send), so a program without such messages
// pays no memory for them.
inline constexpr std::size_t kIpcEagerSendMaxDefault = std::size_t{16} << 20;
std::size_t ipcEagerSendMaxBytes(const Settings& settings);
// Memory of one sender's row of slots that larger slots are fitted into:
// slots of more than kIpcSlotRowBudget / ipcEagerSlots() bytes come fewer
// per row (a power of two, at least 2).
inline constexpr std::size_t kIpcSlotRowBudget = std::size_t{32} << 20;
// The eager slots of each sender's row in a receiver's signal page, for a
// program whose largest eager send is `largest` bytes
// (BackendContext::largest_eager_send; -1: unknown, then sized for
// ipcEagerSendMaxBytes()): as large as that send, at least
// ipcEagerMaxBytes() (a multiple of 16), and ipcEagerSlots() of them, or
// fewer where a row would pass kIpcSlotRowBudget. None (0 and 0) when eager
// is off. A page holds world rows.
using IpcEagerSlots = EagerSlots;  // BackendCaps::eager_slots
IpcEagerSlots ipcEagerSlotsFor(const Settings& settings, int64_t largest);
// Eager messages of 1 to ipcInlineMaxBytes() bytes (HIR_IPC_INLINE_MAX; 0:
// none) travel in lines, with their flags inline (messages.h), where the
// device offers it; the backend caps it at half a slot and at the device's
// inlineFlagsMax(), and compares the result across ranks.
std::size_t ipcInlineMaxBytes(const Settings& settings);

// BackendCaps::resolve_protocol of ipc (send and recv): auto is eager up to
// ipcEagerSendMaxBytes(), put above; an eager message above it is refused.
Protocol ipcResolveProtocol(const Settings& settings, Protocol asked, std::size_t bytes);

// BackendCaps::collective_messages of ipc.
std::string_view ipcCollectiveMessages(const CollectiveShape& shape, const Settings& settings,
                                       std::vector<CollectiveMessage>& out);

// The elements of chunk k of `count` split over `parts` (the first
// count % parts chunks one longer): [chunkBegin, chunkBegin + chunkLength).
std::size_t chunkBegin(std::size_t count, int parts, int k);
std::size_t chunkLength(std::size_t count, int parts, int k);

}  // namespace hir
