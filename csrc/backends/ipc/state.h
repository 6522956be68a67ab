// The ipc backend's state and the types its files share (private to
// backends/ipc/; docs/ipc.md tells the whole story). Which collectives are
// which messages is in collectives.h; the exchange's tables in exchange.h.
//
// A message from s to r with sequence number q (PostArgs::remote.pair_seq) moves
// like this, each side on its stream for (peer, direction), after the
// stream waited for the inputs to be ready on the poster's current stream:
//
//   put  receiver r: signal s.page[r][PutFree] = q;  wait r.page[s][PutDone] >= q
//        sender   s: wait s.page[r][PutFree] >= q;   copy s.buf -> r.buf;
//                    signal r.page[s][PutDone] = q
//   get  sender   s: signal r.page[s][GetReady] = q; wait s.page[r][GetConsumed] >= q
//        receiver r: wait r.page[s][GetReady] >= q;  copy s.buf -> r.buf;
//                    signal s.page[r][GetConsumed] = q
//
//   eager (small messages, numbered e per lane among eager messages; see
//   resolveEager): the sender copies into slot e % slots of the receiver's
//   page and signals EagerDone; the receiver copies out, signals EagerFree
//
// where x.page[w][k] is counter w * 6 + k of rank x's signal page, written
// only by rank w. The side that copies maps the other's buffer ("imports");
// the other side's buffer is "exported". Every counter only grows (modulo
// 2^32: q is the message's number plus HIR_IPC_SEQ_START, 0 unless a test
// starts near the wrap, and every wait compares cyclically,
// (int32)(value - q) >= 0, as cuStreamWaitValue32 does), so a wait for >= q
// is satisfied by q or any later message, which comes after q on both
// sides: the messages of one pair and direction (a lane) run in order, on
// the lane's stream, or on a poster's stream (postJoined) after the lane's
// earlier messages.
//
// Counted mode (graph mode, BackendContext::graph; HIR_IPC_COUNTED=1 for
// tests): q is not written into the work by the host but counted on the
// device, one counter per lane and rank (DeviceMessages::countedStep), so that a
// graph's replays of the same work go on numbering. Both ends of a lane count
// its messages in the same order, from the same start, so they agree on q
// as the host's numbers do. A release word ends every counted wait on
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/ipc/collectives.h"
#include "backends/ipc/exchange.h"
#include "backends/ipc/ipc_backend.h"
#include "common/check.h"
#include "device/messages.h"
#include <hostir/backend.h>
#include <hostir/device.h>

namespace hir::ipc {

// Counters of a signal page, per writer rank. Eager messages have numbers
// of their own (1, 2, ... per lane, counting eager messages only), which
// also pick their slot.
enum Signal : int {
  kPutFree = 0,
  kPutDone = 1,
  kGetReady = 2,
  kGetConsumed = 3,
  kEagerDone = 4,  // the sender, into the receiver's page: "message e is in its slot"
  kEagerFree = 5,  // the receiver, into the sender's page: "I copied message e out"
  // The receiver, into the sender's page: "my buffer for eager message e is
  // free: write it there" (direct delivery, resolveEager).
  kEagerPosted = 6,
  kSignals = 7
};

// Where a page's slots begin, after its counters.
constexpr std::size_t kSlotAlign = 256;

// The signal page's own slot in an exchange table (allocation slots are >= 0).
constexpr int64_t kPageSlot = -1;

// A phased post's local copies (a collective's own chunk) of at least this
// many bytes in all run on a stream beside the post's (State::Aside), so
// that the transfers do not queue behind them: no peer reads or writes them.
// Below it, the fork and the join (two event records and two waits) cost
// more than the copy (docs/performance.md, "ipc's defaults").
constexpr std::size_t kAsideCopyMin = std::size_t{4} << 20;

// How long teardown lets the streams run once unblock() released their
// waits (after a failure).
constexpr Duration kReleaseDrain{1000};

inline bool isGet(Protocol p) { return p == Protocol::Get; }

// Put writes into the receiver's buffer, get reads the sender's: that buffer
// is exported by its owner and imported by the side that copies.
inline bool exportsBuffer(CommType type, Protocol p) {
  return (type == CommType::Recv) != isGet(p);
}

inline std::string_view direction(CommType type) {
  return type == CommType::Send ? "send to" : "recv from";
}

struct Lane;

// A post's op, resolved on the posting thread before anything is enqueued.
struct Step {
  Lane* lane = nullptr;
  // Counted mode: q = *counter + offset when the step runs, and the
  // message's last part advances the counter (see postJoined()).
  uint32_t* counter = nullptr;
  uint32_t offset = 1, advance = 1;
  bool copies = false;  // this side copies (it imported the peer's buffer)
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  uint32_t* signal = nullptr;       // in the peer's page (or ours, for ourselves)
  const uint32_t* await = nullptr;  // in our page
  uint32_t seq = 0;       // what the step signals
  uint32_t wait_seq = 0;  // what it waits for (an eager send: its slot's previous message)
  // An eager send: it waits only for messages of earlier posts (its slot
  // freed), so enqueuePhased() runs it with the signals, before any wait.
  bool early = false;
  // Counted eager steps: the slot of number v is v % slots, dst or src
  // pointing at slot 0 (CountedStep).
  uint32_t wait_back = 0, slots = 0;
  std::size_t dst_stride = 0, src_stride = 0;
  bool eager = false;  // an eager message (resolveEager)
  bool inline_flags = false;  // an eager message in lines (no "done" wait)
  // Direct delivery of an eager message (MessageStep::Copy's fields of that
  // name): the receiver's buffer (a send), the "posted" word and the mark
  // (or the lane's ring of marks in counted mode).
  void* direct = nullptr;
  uint32_t* posted = nullptr;
  uint32_t* mark = nullptr;
  // A get or eager message of a reduction: reduce unit `unit` of the post
  // reads `src` (the sender's buffer, or the slot) as its source `source`,
  // instead of a copy (wait, then the unit's reduce, then signal).
  int unit = -1, source = -1;
};

// A collective's own chunk: a copy that needs no peer.
struct LocalCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

// A reduction of the team's buffers, in team order (DeviceMessages::reduce), once
// its get messages' senders said their buffers are ready.
struct ReduceUnit {
  void* dst = nullptr;
  std::array<const void*, kIpcMaxReduceMembers> srcs{};
  int members = 0;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::size_t count = 0;
  // Where in the post's steps its first source comes, which is where it is
  // enqueued (-1: a team of one, no peer's source).
  int first_step = -1;
};

// A post resolved, before anything is enqueued, for the phases of
// State::enqueuePhased(). One per backend, reused by every post (under the
// post mutex): its vectors keep their capacity, so a post in the steady
// state allocates nothing.
struct Work {
  std::vector<Step> steps;
  std::vector<Lane*> lanes;
  std::vector<LocalCopy> copies;
  std::vector<ReduceUnit> units;
  std::vector<std::pair<uint32_t*, uint32_t>> per_counter;  // countInGroup's
  void clear() {
    steps.clear();
    lanes.clear();
    copies.clear();
    units.clear();
  }
};

// The messages of one (peer, direction), in order. Posts run them on
// `stream`, joined posts on the poster's stream; `on` is where the last of
// them went (null: nowhere yet) and `tail`, recorded after a joined post's
// messages, is what the lane's next message waits for when it runs
// elsewhere. (The lane's stream holds nothing but the lane's messages, so
// recording `tail` there at a switch is exact too.)
struct Lane {
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Event> tail;
  Stream* on = nullptr;
  uint32_t eager = 0;  // the latest eager message's number (host-numbered)
};

// Lanes of one post, each once.
inline void addLane(std::vector<Lane*>& lanes, Lane* l) {
  if (std::find(lanes.begin(), lanes.end(), l) == lanes.end()) lanes.push_back(l);
}

// The backend's state, shared by the files of backends/ipc/: what setup()
// laid out (setup.cc), how a post's ops become steps (resolve.cc), how steps
// are enqueued on streams (schedule.cc), the handle exchange (share.cc) and
// teardown (ipc_backend.cc).
struct State {
  struct Export {
    void* base = nullptr;
    MemoryHandle handle;
  };
  struct Import {
    void* ptr = nullptr;
    std::vector<uint8_t> handle;
    std::size_t bytes = 0;  // the block's size, as its owner offered it
    bool own = false;  // our own block (a message to ourselves): not a mapping
    // Whether [offset, offset + n) lies within the block.
    bool holds(std::size_t offset, std::size_t n) const {
      return offset <= bytes && n <= bytes - offset;
    }
  };

  BackendContext ctx;
  Device* dev = nullptr;
  // The device's message protocol (messagesOf): its own, or the generic one
  // over its public calls, held in `generic_msg`.
  DeviceMessages* msg = nullptr;
  std::unique_ptr<DeviceMessages> generic_msg;
  int rank = -1, world = 0;
  std::vector<std::string> nodes;

  // world x kSignals counters, written by peers, then (at marks_offset)
  // eager_slots direct-delivery marks per sender rank, then (at
  // slots_offset) the eager slots: eager_slots per sender, each of
  // slot_bytes followed, when lines are on, by its line area of line_bytes
  // (slot_stride in all). A message in lines goes to the line area of its
  // slot, never to the slot itself: the slot may hold a larger message's
  // data, whose words a line's flag half could equal (the flags a line area
  // can hold are 0 and the flags of the slot's earlier messages in lines,
  // none of them the next one's: messages.h). One stride for both keeps a
  // counted step's parts in one ring (MessageStep::stride).
  uint32_t* page = nullptr;
  std::size_t eager_max = 0, slot_bytes = 0, marks_offset = 0, slots_offset = 0;
  std::size_t line_bytes = 0, slot_stride = 0;
  uint32_t eager_slots = 0;
  bool direct = true;  // HIR_IPC_DIRECT
  bool push_steps = true;  // HIR_IPC_PUSH_STEPS
  // Eager messages of 1 to inline_max bytes travel in lines (flags inline,
  // messages.h): no "done" wait for the receiver, no fence for the sender.
  std::size_t inline_max = 0;
  // Counted mode: this rank's lane counters (sends to each peer, then
  // receives from each, then the same two for eager messages), then the
  // release word; device memory of its own, also allocated (for the
  // release word) when messages go in lines, whose waits end on it.
  bool counted = false;
  uint32_t* counts = nullptr;
  uint32_t seq_start = 0;    // HIR_IPC_SEQ_START: message q signals seq_start + q
  // Per peer: the latest message number posted with it (either direction),
  // and the latest eager number, for unblock() from any thread.
  std::unique_ptr<std::atomic<uint32_t>[]> latest, latest_eager;
  std::size_t page_bytes = 0;
  std::vector<uint8_t> page_handle;               // exported at the first exchange
  std::vector<uint32_t*> peer_pages;              // per peer, once exchanged (ours for ourselves)
  std::vector<void*> mapped_pages;                // the peers' pages we imported, to close
  std::map<int, Export> exports;                  // allocation slot -> what peers map
  // [peer][its allocation slot]: a vector, not a map, since every message
  // that copies looks its peer's block up (ptr null: not mapped).
  std::vector<std::vector<Import>> imports;
  std::vector<void*> retired;                     // mappings replaced by a newer block

  std::vector<Lane> send_lanes, recv_lanes;  // per peer
  std::unique_ptr<Stream> join;     // joins the streams of a group post
  // Posts with collectives that are not joined, one stream per team (of
  // the post's first collective): collectives of different teams overlap,
  // a team's run in order (their lanes order them anyway).
  std::vector<std::unique_ptr<Stream>> phased;
  // Beside the stream of a phased post (a team's, or a joined post's
  // poster's): its large local copies, forked from that stream where the
  // copies would have gone and joined back after its last waits.
  struct Aside {
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Event> forked, done;
  };
  std::map<const Stream*, Aside> asides;  // by the phased post's stream
  std::unique_ptr<Stream> control;  // page fills (setup, abort)
  std::unique_ptr<Event> ready, joined;
  std::mutex post_mutex;  // see post()
  Work work;              // the post's, under post_mutex
  std::atomic<bool> aborted{false};  // abort(): later posts throw, teardown does not wait
  int64_t exchanges = 0;

  Lane& laneFor(CommType type, int peer) {
    Lane& l = (type == CommType::Send ? send_lanes : recv_lanes)[peer];
    if (!l.stream) {
      l.stream = dev->createStream();
      l.tail = dev->createEvent();
    }
    return l;
  }
  Step resolve(const PostArgs& a);
  Step resolveEager(const PostArgs& a, Step s, uint32_t* peer_page);
  uint32_t* marksOf(uint32_t* any_page, int sender) const {
    return reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(any_page) + marks_offset) +
           static_cast<std::size_t>(sender) * eager_slots;
  }
  char* slotsOf(uint32_t* any_page, int sender) const {
    return reinterpret_cast<char*>(any_page) + slots_offset +
           static_cast<std::size_t>(sender) * eager_slots * slot_stride;
  }
  const Import* importOf(int peer, int slot) const {
    const std::vector<Import>& of_peer = imports[static_cast<std::size_t>(peer)];
    if (slot < 0 || static_cast<std::size_t>(slot) >= of_peer.size()) return nullptr;
    const Import& im = of_peer[static_cast<std::size_t>(slot)];
    return im.ptr != nullptr ? &im : nullptr;
  }
  // Adds op `a` (a send, a recv or a collective's messages and local part)
  // to `w`.
  void add(const PostArgs& a, Work& w);
  void addCollective(const PostArgs& a, Work& w);
  // Everything of `w` on `on`: the lanes' earlier messages (unless on
  // `covered`), the signals of the sides that do not copy, the local
  // copies (large ones beside `on`), the copies and the reductions in step
  // order, then the remaining waits.
  void enqueuePhased(Work& w, Stream& on, const Stream* covered);
  // Send/recv steps only: each on its lane's stream (enqueue()), `done`
  // after all of them.
  void enqueueDetached(Work& w, Stream& current, Event& done);
  void reduce(Stream& on, Work& w, int unit, bool push_sends = false);
  // `w` is one eager one-shot reduction and nothing else: its eager sends
  // and its reduction can be one device step (reduce() with push_sends),
  // since the phases would enqueue them back to back.
  bool oneStep(const Work& w) const {
    if (w.units.size() != 1 || w.units[0].first_step < 0 || !w.copies.empty()) return false;
    return std::all_of(w.steps.begin(), w.steps.end(),
                       [](const Step& s) { return s.early || s.unit == 0; });
  }
  // `w` is eager messages, local copies and nothing else (no reduction): its
  // sends, local copies and receives, in that order (the phases' order but
  // for the local copies, which touch only the member's own chunk), are
  // device message steps, one unless more than kMaxReduceSources of a kind.
  bool onlyEager(const Work& w) const {
    return w.units.empty() &&
           std::all_of(w.steps.begin(), w.steps.end(), [](const Step& s) { return s.eager; });
  }
  void messageSteps(Stream& on, const Work& w);
  // Step `s` as a MessageStep part (its ring's size into `m`).
  MessageStep::Copy copyOf(const Step& s, MessageStep& m) const;
  uint32_t* releaseWord() const { return counts + 4 * static_cast<std::size_t>(world); }
  // What a device step's waits end on (MessageStep::release): counted waits
  // and waits for lines need it; host-numbered ones end by the page's
  // counters, which unblock() also sets.
  const uint32_t* stepRelease() const { return counts != nullptr ? releaseWord() : nullptr; }
  // The most eager sends to one peer in `ops`, which must not exceed the
  // slots in one phased post: the later ones would wait for the peer to
  // copy out this post's earlier ones, which enqueuePhased() runs after
  // every eager send.
  uint32_t eagerLoad(std::span<const PostArgs> ops);
  // Calls fn(peer) for each eager send of op `a`.
  template <class Fn>
  void forEachEagerSend(const PostArgs& a, Fn&& fn) const;
  // A post on the one stream `on`: one phased post, or, when a lane has
  // more eager sends than slots (a post of collectives; postJoined() runs
  // other such posts lane by lane), waves of whole ops that each fit (a
  // group of many small collectives), one after the other. A send or recv
  // in such a post could then wait for a peer's group that is cut
  // elsewhere: that is refused, naming the collective and the message.
  void enqueueOnStream(std::span<const PostArgs> ops, Stream& on, const Stream* covered);
  std::vector<uint32_t> wave_load;  // eager sends per peer of the wave so far (world)
  void enqueue(const Step& s, Stream& current);
  // Makes `on` wait for the lane's earlier messages, unless they ran on `on`
  // itself or on `covered` (whose work `on` already waits for).
  void follow(Lane& l, Stream& on, const Stream* covered);
  // The three phases of a message: the side that copies waits for the
  // peer's signal, copies and signals (transfer); the other side signals
  // (announce), then waits (await).
  void announce(Stream& on, const Step& s);
  // A step's wait for its peer's signal alone, and its own signal alone
  // (`advance`: the counter's, in counted mode; see countInGroup()).
  void waitFor(Stream& on, const Step& s, uint32_t advance);
  void signalTo(Stream& on, const Step& s, uint32_t advance);
  void transfer(Stream& on, const Step& s);
  void await(Stream& on, const Step& s);
  void importPage(int peer, const Table& table);
  void importBlock(int peer, int slot, const Offer& offer);
  std::string exportError(const ShareItem& item, const std::string& what) const;
  void unblock();
  void shutdown() noexcept;
};

template <class Fn>
void State::forEachEagerSend(const PostArgs& a, Fn&& fn) const {
  if (isPointToPoint(a.type)) {
    if (a.type == CommType::Send && a.protocol == Protocol::Eager) fn(a.peer);
    return;
  }
  const std::vector<int>& team = ctx.teams[static_cast<std::size_t>(a.team)];
  for (const CollectivePiece& piece : a.pieces)
    if (piece.message.protocol == Protocol::Eager &&
        team[static_cast<std::size_t>(piece.message.from)] == rank)
      fn(piece.peer_rank);
}

}  // namespace hir::ipc
