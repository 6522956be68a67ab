#include "backends/ipc/collectives.h"

#include <algorithm>

#include "common/check.h"

namespace hir {

std::size_t ipcOneShotMaxBytes(const Settings& settings, int members) {
  const int64_t set = settings.get(Setting::IpcOneShotMax);
  if (set >= 0) return static_cast<std::size_t>(set);
  return members == 2 ? kIpcOneShotMaxPair : kIpcOneShotMax;
}

std::size_t ipcBroadcastSplitMinBytes(const Settings& settings) {
  return static_cast<std::size_t>(settings.get(Setting::IpcBroadcastSplitMin));
}

std::size_t ipcEagerMaxBytes(const Settings& settings) {
  return static_cast<std::size_t>(settings.get(Setting::IpcEagerMax));
}

std::size_t ipcEagerSendMaxBytes(const Settings& settings) {
  const std::size_t chunks = ipcEagerMaxBytes(settings);
  if (chunks == 0) return 0;
  return std::max(chunks, static_cast<std::size_t>(settings.get(Setting::IpcEagerSendMax)));
}

IpcEagerSlots ipcEagerSlotsFor(const Settings& settings, int64_t largest) {
  const std::size_t max = ipcEagerMaxBytes(settings);
  if (max == 0) return {};
  const uint32_t slots = ipcEagerSlots(settings);
  const std::size_t need =
      largest < 0 ? ipcEagerSendMaxBytes(settings) : static_cast<std::size_t>(largest);
  const std::size_t bytes = (std::max(max, need) + 15) / 16 * 16;
  if (bytes <= max || static_cast<std::size_t>(slots) * bytes <= kIpcSlotRowBudget)
    return {bytes, slots};
  uint32_t fit = 2;
  while (fit * 2 <= slots && static_cast<std::size_t>(fit) * 2 * bytes <= kIpcSlotRowBudget)
    fit *= 2;
  return {bytes, std::min(fit, slots)};
}

std::size_t ipcInlineMaxBytes(const Settings& settings) {
  return static_cast<std::size_t>(settings.get(Setting::IpcInlineMax));
}

uint32_t ipcEagerSlots(const Settings& settings) {
  return static_cast<uint32_t>(settings.get(Setting::IpcEagerSlots));  // a power of two
}

Protocol ipcResolveProtocol(const Settings& settings, Protocol asked, std::size_t bytes) {
  const std::size_t max = ipcEagerSendMaxBytes(settings);
  if (asked == Protocol::Auto) return max > 0 && bytes <= max ? Protocol::Eager : Protocol::Put;
  HIR_CHECK(asked != Protocol::Eager || bytes <= max,
            "protocol 'eager' carries at most {} bytes in one send or recv (the larger of "
            "HIR_IPC_EAGER_SEND_MAX and HIR_IPC_EAGER_MAX; none when HIR_IPC_EAGER_MAX is 0), "
            "and this one has {}; use 'put' or 'auto' (which picks put above that size)",
            max, bytes);
  return asked;
}

std::size_t chunkBegin(std::size_t count, int parts, int k) {
  const std::size_t n = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(k);
  return count / n * i + std::min(i, count % n);
}

std::size_t chunkLength(std::size_t count, int parts, int k) {
  const std::size_t n = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(k);
  return count / n + (i < count % n ? 1 : 0);
}

std::string_view ipcCollectiveMessages(const CollectiveShape& s, const Settings& settings,
                                       std::vector<CollectiveMessage>& out) {
  out.clear();
  const int n = s.team_size, me = s.me;
  const std::size_t c = s.count;
  HIR_INTERNAL_ASSERT(n >= 1 && me >= 0 && me < n, "ipc collective: member {} of a team of {}",
                      me, n);
  // Member me's k-th peer in ring order each way: messages spread over the
  // peers instead of all starting with member 0.
  HIR_CHECK(n <= kIpcMaxCollectiveMembers,
            "backend 'ipc' runs collectives of at most {} ranks (the ranks of one node), and this "
            "{} has a team of {}; use backend \"auto\"",
            kIpcMaxCollectiveMembers, toString(s.type), n);
  auto to = [&](int k) { return (me + k) % n; };
  auto from = [&](int k) { return (me - k + n) % n; };
  auto add = [&](int f, int t, bool from_output, std::size_t from_offset, std::size_t to_offset,
                 std::size_t count, Protocol protocol) {
    out.push_back({f, t, from_output, from_offset, to_offset, count, protocol});
  };
  // Every message of the copies and of one-shot carries c elements: up to
  // the eager limit they go through the receiver's slots, with no round
  // trip (the same decision on every member: c and the limit are).
  const std::size_t eager_max = ipcEagerMaxBytes(settings);
  const bool eager = eager_max > 0 && c * dtypeSize(s.dtype) <= eager_max;
  const Protocol copy = eager ? Protocol::Eager : Protocol::Put;
  const std::string_view copies = eager ? "eager copies" : "copies";
  switch (s.type) {
    case CommType::Allgather:
      for (int k = 1; k < n; ++k) {
        add(me, to(k), false, 0, me * c, c, copy);
        add(from(k), me, false, 0, from(k) * c, c, copy);
      }
      return copies;
    case CommType::Broadcast:
      HIR_INTERNAL_ASSERT(s.root >= 0 && s.root < n, "ipc broadcast from member {} of {}", s.root,
                          n);
      if (!eager && n >= 3 && c * dtypeSize(s.dtype) >= ipcBroadcastSplitMinBytes(settings)) {
        // The members other than the root, in ring order from it: member
        // at(p) holds chunk p of T - 1. It gets its chunk from the root, then
        // puts it from its output into the others' (after the get on its
        // stream: gets come first), sends and receives in ring order.
        const int m = n - 1;
        auto at = [&](int p) { return (s.root + 1 + p) % n; };
        auto chunk = [&](int f, int t, int p, bool from_output, Protocol protocol) {
          const std::size_t begin = chunkBegin(c, m, p);
          add(f, t, from_output, begin, begin, chunkLength(c, m, p), protocol);
        };
        if (me == s.root) {
          for (int p = 0; p < m; ++p) chunk(me, at(p), p, false, Protocol::Get);
          return "scatter-allgather";
        }
        const int q = (me - s.root - 1 + n) % n;
        chunk(s.root, me, q, false, Protocol::Get);
        for (int k = 1; k < m; ++k) {
          chunk(me, at((q + k) % m), q, true, Protocol::Put);
          const int from_p = (q - k + m) % m;
          chunk(at(from_p), me, from_p, true, Protocol::Put);
        }
        return "scatter-allgather";
      }
      for (int k = 1; k < n; ++k) {
        const int peer = (s.root + k) % n;
        if (me == s.root)
          add(me, peer, false, 0, 0, c, copy);
        else if (peer == me)
          add(s.root, me, false, 0, 0, c, copy);
      }
      return copies;
    case CommType::Alltoall:
      // Eager copies read the whole input before any peer's chunk lands,
      // but the put copies do not: one rule for both.
      HIR_CHECK(!s.in_place || n == 1,
                "backend 'ipc' runs alltoall by copies into the peers' outputs while they read "
                "their inputs, so it cannot run in place: give it an output apart from its input");
      for (int k = 1; k < n; ++k) {
        add(me, to(k), false, to(k) * c, me * c, c, copy);
        add(from(k), me, false, me * c, from(k) * c, c, copy);
      }
      return copies;
    case CommType::ReduceScatter:
    case CommType::Allreduce: {
      HIR_CHECK(n <= kIpcMaxReduceMembers,
                "backend 'ipc' reduces the buffers of at most {} ranks in one kernel, and this "
                "{} has a team of {}",
                kIpcMaxReduceMembers, toString(s.type), n);
      const bool scatter = s.type == CommType::ReduceScatter;
      if (eager || scatter ||
          (!s.in_place && c * dtypeSize(s.dtype) <= ipcOneShotMaxBytes(settings, n))) {
        // Member me reduces [me * c, +c) of each input (reduce_scatter) or
        // all of it (allreduce): read where it is (get), or pushed by each
        // peer into me's slots (eager; in place too, since no peer reads
        // what me overwrites).
        const Protocol p = eager ? Protocol::Eager : Protocol::Get;
        for (int k = 1; k < n; ++k) {
          add(me, to(k), false, scatter ? to(k) * c : 0, 0, c, p);
          add(from(k), me, false, scatter ? me * c : 0, 0, c, p);
        }
        return eager ? "eager one-shot" : "one-shot";
      }
      // Reduce chunk me of every input into the own output, then put it into
      // every peer's output.
      const std::size_t mine = chunkBegin(c, n, me), length = chunkLength(c, n, me);
      for (int k = 1; k < n; ++k) {
        const std::size_t theirs = chunkBegin(c, n, to(k));
        add(me, to(k), false, theirs, theirs, chunkLength(c, n, to(k)), Protocol::Get);
        add(from(k), me, false, mine, mine, length, Protocol::Get);
      }
      for (int k = 1; k < n; ++k) {
        const std::size_t theirs = chunkBegin(c, n, from(k));
        add(me, to(k), true, mine, mine, length, Protocol::Put);
        add(from(k), me, true, theirs, theirs, chunkLength(c, n, from(k)), Protocol::Put);
      }
      return "two-shot";
    }
    case CommType::Reduce:
    case CommType::Gather:
    case CommType::Scatter:
    case CommType::Send:
    case CommType::Recv:
      break;
  }
  HIR_INTERNAL_ASSERT(false, "ipc does not run {} as messages (its caps do not list it)",
                      toString(s.type));
  return {};
}

}  // namespace hir
