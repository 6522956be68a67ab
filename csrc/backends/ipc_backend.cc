// The ipc backend (see ipc_backend.h and docs/ipc.md): the protocol of a
// message, how a collective becomes messages, and the exchange that maps
// the memory they move, which share the backend's state. Which collectives
// are which messages is in ipc_collectives.cc; the exchange's tables and
// allgathers in ipc_exchange.cc.
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
// device, one counter per lane and rank (Device::countedStep), so that a
// graph's replays of the same work go on numbering. Both ends of a lane count
// its messages in the same order, from the same start, so they agree on q
// as the host's numbers do. A release word ends every counted wait on
// abort().
#include "backends/ipc_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "backends/ipc_collectives.h"
#include "backends/ipc_exchange.h"
#include "common/check.h"
#include "common/parse_int.h"
#include "common/log.h"
#include <hostir/bootstrap.h>

namespace hir {

namespace {

using ipc::Table;
using ipc::TableWriter;
using ipc::allgatherStatus;
using ipc::allgatherTables;
using ipc::throwIfAnyFailed;

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

// HIR_IPC_DIRECT=0 moves every eager message through its slot (an A/B
// knob); by default a receiver that posted first gets its data directly.
bool ipcDirect() {
  return envSwitch("HIR_IPC_DIRECT",
                   "an eager message whose receiver posted first is written straight into its "
                   "buffer",
                   true);
}

// HIR_IPC_PUSH_STEPS=0 gives the device each put and get of a post as a
// step of its own (an A/B knob); by default consecutive ones are one step
// (enqueuePhased), which a device may move at once.
bool ipcPushSteps() {
  return envSwitch("HIR_IPC_PUSH_STEPS",
                   "a post's consecutive puts and gets are one device step", true);
}

// Where a page's slots begin, after its counters.
constexpr std::size_t kSlotAlign = 256;

// The signal page's own slot in an exchange table (allocation slots are >= 0).
constexpr int64_t kPageSlot = -1;

// A phased post's local copies (a collective's own chunk) of at least this
// many bytes in all run on a stream beside the post's (State::Aside), so
// that the transfers do not queue behind them: no peer reads or writes them.
// On 2 H100s a 1 GiB broadcast took 3.47 ms where a 1 GiB put took 2.83:
// the root's local copy, before its put on the one stream. Below, the fork
// and the join (two event records and two waits, about 1 us of host time)
// would cost more than the copy (about 0.7 us per MiB there).
constexpr std::size_t kAsideCopyMin = std::size_t{4} << 20;

// How long teardown lets the streams run once unblock() released their
// waits (after a failure).
constexpr Duration kReleaseDrain{1000};

bool isGet(Protocol p) { return p == Protocol::Get; }

// Put writes into the receiver's buffer, get reads the sender's: that buffer
// is exported by its owner and imported by the side that copies.
bool exportsBuffer(CommType type, Protocol p) { return (type == CommType::Recv) != isGet(p); }

std::string_view direction(CommType type) {
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

// A reduction of the team's buffers, in team order (Device::reduce), once
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
void addLane(std::vector<Lane*>& lanes, Lane* l) {
  if (std::find(lanes.begin(), lanes.end(), l) == lanes.end()) lanes.push_back(l);
}

}  // namespace

struct IpcBackend::State {
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
  // none of them the next one's: device.h). One stride for both keeps a
  // counted step's parts in one ring (MessageStep::stride).
  uint32_t* page = nullptr;
  std::size_t eager_max = 0, slot_bytes = 0, marks_offset = 0, slots_offset = 0;
  std::size_t line_bytes = 0, slot_stride = 0;
  uint32_t eager_slots = 0;
  bool direct = true;  // HIR_IPC_DIRECT
  bool push_steps = true;  // HIR_IPC_PUSH_STEPS
  // Eager messages of 1 to inline_max bytes travel in lines (flags inline,
  // device.h): no "done" wait for the receiver, no fence for the sender.
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
  void importBlock(int peer, int slot, const ipc::Offer& offer);
  std::string exportError(const ShareItem& item, const std::string& what) const;
  void unblock();
  void checkNotAborted(std::span<const PostArgs> ops) const {
    HIR_CHECK_AS(BackendError, !aborted.load(),
                 "ipc: cannot post at {} on rank {}: the backend was aborted",
                 ops.empty() ? "" : ops[0].path, rank);
  }
  void shutdown() noexcept;
};

Step IpcBackend::State::resolve(const PostArgs& a) {
  HIR_INTERNAL_ASSERT(isPointToPoint(a.type), "{}: ipc bound to {}", a.path, toString(a.type));
  HIR_INTERNAL_ASSERT(a.peer >= 0 && a.peer < world, "{}: peer {} outside the world", a.path,
                      a.peer);
  HIR_INTERNAL_ASSERT(a.remote.pair_seq >= 1 && a.remote.alloc >= 0,
                      "ipc: {}: {} rank {} was posted without the peer's address "
                      "(PostArgs::remote), which the evaluator fills from the load-time trace",
                      a.path, direction(a.type), a.peer);
  uint32_t* peer_page = peer_pages[a.peer];
  HIR_CHECK(peer_page != nullptr,
            "ipc: {}: {} rank {} before any share_mem_handles exchanged with rank {}; list this "
            "communication in a share_mem_handles that runs before it",
            a.path, direction(a.type), a.peer, a.peer);
  const bool get = isGet(a.protocol);
  const int me = rank, peer = a.peer;
  Step s;
  s.lane = &laneFor(a.type, peer);
  if (a.protocol == Protocol::Eager) return resolveEager(a, s, peer_page);
  if (counted)
    s.counter = counts + (a.type == CommType::Send ? 0 : world) + static_cast<std::size_t>(peer);
  // Modulo 2^32: the waits compare cyclically.
  s.seq = s.wait_seq = static_cast<uint32_t>(seq_start + a.remote.pair_seq);
  std::atomic<uint32_t>& l = latest[static_cast<std::size_t>(peer)];
  if (static_cast<int32_t>(s.seq - l.load(std::memory_order_relaxed)) > 0)
    l.store(s.seq, std::memory_order_relaxed);
  s.bytes = a.count * dtypeSize(a.dtype);
  s.copies = !exportsBuffer(a.type, a.protocol);
  const bool send = a.type == CommType::Send;
  // Our counters for this message are the ones the peer writes: as the
  // sender, the receiver's "free"/"consumed"; as the receiver, the sender's
  // "done"/"ready". The peer's counter is the one we write.
  const Signal ours = send ? (get ? kGetConsumed : kPutFree) : (get ? kGetReady : kPutDone);
  const Signal theirs = send ? (get ? kGetReady : kPutDone) : (get ? kGetConsumed : kPutFree);
  s.await = page + peer * kSignals + ours;
  s.signal = peer_page + me * kSignals + theirs;
  if (!s.copies) return s;
  const Import* im = importOf(peer, a.remote.alloc);
  HIR_CHECK(im != nullptr,
            "ipc: {}: {} rank {} ({}): rank {}'s allocation #{} was never exchanged; a "
            "share_mem_handles listing this communication must run after that allocation and "
            "before this post",
            a.path, direction(a.type), peer, toString(get ? Protocol::Get : Protocol::Put), peer,
            a.remote.alloc);
  // The load-time trace placed the message in the peer's block; a peer
  // whose block is smaller (another program or other params on that rank,
  // which a check of one rank's view cannot see) must not be written past.
  HIR_CHECK(im->holds(a.remote.offset, s.bytes),
            "ipc: {}: {} rank {} ({}) of {} bytes at byte {} of rank {}'s allocation #{}, which "
            "has {} bytes: the ranks disagree on the message (do they run the same program with "
            "the same params?)",
            a.path, direction(a.type), peer, toString(get ? Protocol::Get : Protocol::Put),
            s.bytes, a.remote.offset, peer, a.remote.alloc, im->bytes);
  char* remote = static_cast<char*>(im->ptr) + a.remote.offset;
  if (send) {
    s.dst = remote;
    s.src = a.input;
  } else {
    s.dst = a.output;
    s.src = remote;
  }
  return s;
}

// An eager message e (numbered per lane among eager messages) goes through
// slot e % eager_slots of the receiver's page, of the sender's row:
//   sender   s: wait s.page[r][EagerFree] >= e - slots (the slot's previous
//               message was copied out); copy s.buf -> the slot (mapped);
//               signal r.page[s][EagerDone] = e
//   receiver r: wait r.page[s][EagerDone] >= e; copy the slot -> r.buf;
//               signal s.page[r][EagerFree] = e
// Both sides copy, each as one signaledCopy (one kernel on cuda). The
// sender needs no answer from the receiver for this message, and no buffer
// of either side is mapped: only the pages.
Step IpcBackend::State::resolveEager(const PostArgs& a, Step s, uint32_t* peer_page) {
  const int me = rank, peer = a.peer;
  const bool send = a.type == CommType::Send;
  s.bytes = a.count * dtypeSize(a.dtype);
  HIR_CHECK(s.bytes <= slot_bytes,
            "ipc: {}: {} rank {}: an eager message of {} bytes, above the {}-byte eager slots "
            "sized when this backend started (HIR_IPC_EAGER_MAX, HIR_IPC_EAGER_SEND_MAX and "
            "the largest eager message of the program's trace)",
            a.path, direction(a.type), peer, s.bytes, slot_bytes);
  s.copies = true;
  s.early = send;
  s.eager = true;
  Lane& lane = *s.lane;
  s.seq = ++lane.eager;
  std::atomic<uint32_t>& l = latest_eager[static_cast<std::size_t>(peer)];
  if (static_cast<int32_t>(s.seq - l.load(std::memory_order_relaxed)) > 0)
    l.store(s.seq, std::memory_order_relaxed);
  const std::size_t slot = s.seq & (eager_slots - 1);
  if (counted) {
    s.counter = counts + (send ? 2 : 3) * static_cast<std::size_t>(world) +
                static_cast<std::size_t>(peer);
    s.slots = eager_slots;
  }
  // In lines, the receiver waits for the lines' flags, not for "done". The
  // sender still stores "done" (the device orders nothing before it then),
  // so that the lane's next message not in lines compares with a recent
  // number.
  s.inline_flags = s.bytes > 0 && s.bytes <= inline_max;
  // The sender writes our row of the peer's page, the receiver reads the
  // peer's row of its own, in the slot or, for lines, in the slot's line
  // area; counted steps find the slot on the device.
  char* ring = (send ? slotsOf(peer_page, me) : slotsOf(page, peer)) +
               (s.inline_flags ? slot_bytes : 0);
  char* at = counted ? ring : ring + slot * slot_stride;
  const std::size_t stride = counted ? slot_stride : 0;
  s.await = page + peer * kSignals + (send ? kEagerFree : kEagerDone);
  s.signal = peer_page + me * kSignals + (send ? kEagerDone : kEagerFree);
  if (s.inline_flags && !send) s.await = nullptr;
  if (send) {
    s.wait_seq = s.seq - eager_slots;  // the slot's previous message was copied out
    s.wait_back = eager_slots;
    s.src = a.input;
    s.dst = at;
    s.dst_stride = stride;
  } else {
    s.wait_seq = s.seq;
    s.src = at;
    s.src_stride = stride;
    s.dst = a.output;
  }
  // Direct delivery (not in lines, which carry their own flags): the
  // receiver posts e into our page's kEagerPosted once its buffer is free;
  // a sender that sees it writes straight into that buffer (when it mapped
  // it: caller-bound buffers are not shared) and marks the message, so the
  // receiver skips its copy out of the slot. The marks are the receiver's,
  // one per slot of the sender's row.
  if (direct && !s.inline_flags && s.bytes > 0) {
    uint32_t* marks = send ? marksOf(peer_page, me) : marksOf(page, peer);
    s.mark = counted ? marks : marks + slot;
    if (send) {
      s.posted = page + peer * kSignals + kEagerPosted;
      // Never past the receiver's block (ranks that disagree on the message,
      // see resolve()): such a message goes through the slot, which the
      // receiver copies out by its own view of the message.
      const Import* im = importOf(peer, a.remote.alloc);
      if (im != nullptr && im->holds(a.remote.offset, s.bytes))
        s.direct = static_cast<char*>(im->ptr) + a.remote.offset;
      else
        s.mark = s.posted = nullptr;
    } else {
      s.posted = peer_page + me * kSignals + kEagerPosted;
    }
  }
  return s;
}

void IpcBackend::State::waitFor(Stream& on, const Step& s, uint32_t advance) {
  if (s.counter == nullptr) return dev->waitValue(on, s.await, s.wait_seq);
  dev->countedStep(on, CountedStep{.counter = s.counter,
                                   .offset = s.offset,
                                   .advance = advance,
                                   .wait_addr = s.await,
                                   .release = releaseWord(),
                                   .wait_back = s.wait_back});
}

void IpcBackend::State::signalTo(Stream& on, const Step& s, uint32_t advance) {
  if (s.counter == nullptr) return dev->writeValue(on, s.signal, s.seq);
  dev->countedStep(on, CountedStep{.counter = s.counter,
                                   .offset = s.offset,
                                   .advance = advance,
                                   .signal_addr = s.signal});
}

void IpcBackend::State::announce(Stream& on, const Step& s) {
  if (!s.copies) signalTo(on, s, 0);
}

// The side that copies: a message step of one part (a push when it writes
// into the peer's memory or its slot, a pull when it reads out of its own
// slot), which the device runs as one signaled copy or counted step.
void IpcBackend::State::transfer(Stream& on, const Step& s) {
  if (!s.copies) return;
  MessageStep m;
  m.release = stepRelease();
  if (s.eager && !s.early)  // an eager receive: out of its own slot
    m.pulls[m.pull_count++] = copyOf(s, m);
  else
    m.pushes[m.push_count++] = copyOf(s, m);
  dev->messageStep(on, m);
}

void IpcBackend::State::await(Stream& on, const Step& s) {
  if (!s.copies) waitFor(on, s, s.advance);
}

void IpcBackend::State::add(const PostArgs& a, Work& w) {
  if (!isPointToPoint(a.type)) return addCollective(a, w);
  w.steps.push_back(resolve(a));
  addLane(w.lanes, w.steps.back().lane);
}

// The collective's messages (PostArgs::pieces, as ipcCollectiveMessages
// lists them) become steps like a send's or a recv's; what needs no peer
// (the member's own chunk) is a local copy or a source of the reduction.
void IpcBackend::State::addCollective(const PostArgs& a, Work& w) {
  const std::vector<int>& team = ctx.teams[static_cast<std::size_t>(a.team)];
  const int n = static_cast<int>(team.size());
  const int me = static_cast<int>(std::find(team.begin(), team.end(), rank) - team.begin());
  HIR_INTERNAL_ASSERT(me < n, "ipc: {}: rank {} posted a collective of a team it is not in",
                      a.path, rank);
  HIR_INTERNAL_ASSERT(n == 1 || !a.pieces.empty(),
                      "ipc: {}: {} posted without its messages (PostArgs::pieces), which the "
                      "evaluator fills from the load-time trace",
                      a.path, toString(a.type));
  const std::size_t size = dtypeSize(a.dtype), c = a.count;
  const auto* in = static_cast<const char*>(a.input);
  auto* out = static_cast<char*>(a.output);
  const bool reduction = hasReduceOp(a.type);
  ReduceUnit unit;
  std::size_t own_offset = a.type == CommType::ReduceScatter ? me * c : 0;  // n == 1: all of it
  if (reduction) {
    HIR_CHECK_AS(BackendError, dev->supports(DeviceFeature::Reduce),
                 "ipc: {}: {} needs reductions on the device, which {} does not offer", a.path,
                 toString(a.type), dev->describe());
    unit.dst = out;
    unit.members = n;
    unit.dtype = a.dtype;
    unit.op = a.reduce;
    unit.count = c;
  }
  for (const CollectivePiece& piece : a.pieces) {
    const CollectiveMessage& m = piece.message;
    const bool send = m.from == me;
    PostArgs one;
    one.type = send ? CommType::Send : CommType::Recv;
    one.dtype = a.dtype;
    one.count = m.count;
    one.peer = piece.peer_rank;
    one.protocol = m.protocol;
    one.path = a.path;
    one.remote = piece.peer;
    if (send)
      one.input = (m.from_output ? out : in) + m.from_offset * size;
    else
      one.output = out + m.to_offset * size;
    Step step = resolve(one);
    if (reduction && !send && m.protocol != Protocol::Put) {
      // The sender's chunk is a source: every source has this chunk's place.
      step.unit = static_cast<int>(w.units.size());
      step.source = m.from;
      unit.srcs[static_cast<std::size_t>(m.from)] = step.src;
      if (unit.first_step < 0) unit.first_step = static_cast<int>(w.steps.size());
      unit.dst = step.dst;
      unit.count = m.count;
      own_offset = m.from_offset;
    }
    w.steps.push_back(step);
    addLane(w.lanes, step.lane);
  }
  auto local = [&](std::size_t to, const char* from, std::size_t count) {
    char* dst = out + to * size;
    if (dst != from && count > 0) w.copies.push_back({dst, from, count * size});
  };
  switch (a.type) {
    case CommType::Allgather: local(me * c, in, c); break;
    case CommType::Broadcast:
      if (a.root == me) local(0, in, c);
      break;
    case CommType::Alltoall: local(me * c, in + me * c * size, c); break;
    case CommType::Allreduce:
    case CommType::ReduceScatter:
      unit.srcs[static_cast<std::size_t>(me)] = in + own_offset * size;
      w.units.push_back(unit);
      break;
    default:
      HIR_INTERNAL_ASSERT(false, "ipc: {}: {} is not run as messages", a.path, toString(a.type));
  }
}

// One device step: the senders' "ready" (eager: "done"), the reduction,
// then "consumed" ("free") and, in counted mode, the lanes' advance; counted
// eager sources are found on the device, in the slot of their number. With
// `push_sends`, the post's eager sends come first in the same step.
void IpcBackend::State::reduce(Stream& on, Work& w, int u, bool push_sends) {
  MessageStep sync;
  sync.release = stepRelease();
  for (const Step& s : w.steps)
    if (push_sends && s.early) sync.pushes[sync.push_count++] = copyOf(s, sync);
  for (const Step& s : w.steps) {
    if (s.unit != u) continue;
    HIR_INTERNAL_ASSERT(s.wait_back == 0 && s.wait_seq == s.seq,
                        "ipc: a reduction source waits for {} and signals {}", s.wait_seq, s.seq);
    const auto j = static_cast<std::size_t>(s.source);
    const MessageStep::Copy c = copyOf(s, sync);  // its copy is the reduction's read
    sync.counters[j] = c.counter;
    sync.numbers[j] = c.number;
    sync.advances[j] = c.advance;
    sync.waits[j] = c.wait;
    sync.signals[j] = c.signal;
    sync.slotted[j] = c.slotted;
    sync.inline_flags[j] = c.inline_flags;
  }
  const ReduceUnit& r = w.units[static_cast<std::size_t>(u)];
  dev->reduce(on, r.dst, r.srcs.data(), static_cast<std::size_t>(r.members), r.dtype, r.op,
              r.count, &sync);
}

MessageStep::Copy IpcBackend::State::copyOf(const Step& s, MessageStep& m) const {
  MessageStep::Copy c;
  c.counter = s.counter;
  c.number = s.counter != nullptr ? s.offset : s.seq;
  c.advance = s.counter != nullptr ? s.advance : 0;
  c.wait_back = s.counter != nullptr ? s.wait_back : s.seq - s.wait_seq;
  c.wait = s.await;
  c.dst = s.dst;
  c.src = s.src;
  c.bytes = s.bytes;
  c.signal = s.signal;
  c.slotted = s.slots > 0;
  c.inline_flags = s.inline_flags;
  c.direct = s.direct;
  c.posted = s.posted;
  c.mark = s.mark;
  if (c.slotted) {
    m.slots = s.slots;
    m.stride = s.dst_stride + s.src_stride;  // one of them, the slot's size
  }
  return c;
}

void IpcBackend::State::messageSteps(Stream& on, const Work& w) {
  MessageStep m;
  m.release = stepRelease();
  auto flushIfFull = [&](std::size_t n) {
    if (n < m.pushes.size()) return;
    dev->messageStep(on, m);
    m.push_count = m.pull_count = 0;
  };
  // Every push before any pull (a later step's pushes come first in it).
  for (const Step& s : w.steps)
    if (s.early) {
      flushIfFull(m.push_count);
      m.pushes[m.push_count++] = copyOf(s, m);
    }
  for (const LocalCopy& c : w.copies) {
    flushIfFull(m.pull_count);
    MessageStep::Copy& local = m.pulls[m.pull_count++];
    local = MessageStep::Copy{};
    local.dst = c.dst;
    local.src = c.src;
    local.bytes = c.bytes;
  }
  for (const Step& s : w.steps)
    if (!s.early) {
      flushIfFull(m.pull_count);
      MessageStep::Copy& pull = m.pulls[m.pull_count++];
      pull = copyOf(s, m);
      // A pull posts for direct delivery only as its lane's one pull here
      // (device.h).
      if (std::count_if(w.steps.begin(), w.steps.end(), [&](const Step& o) {
            return !o.early && o.lane == s.lane;
          }) > 1)
        pull.posted = nullptr;
    }
  if (m.push_count + m.pull_count > 0) dev->messageStep(on, m);
}

// On the lane's stream, after the poster's `ready` event and the lane's
// last joined message (when that ran on another stream than `current`,
// whose `ready` covers it).
void IpcBackend::State::follow(Lane& l, Stream& on, const Stream* covered) {
  if (l.on == nullptr || l.on == &on || l.on == covered) return;
  if (l.on == l.stream.get()) dev->record(*l.tail, *l.stream);
  dev->wait(on, *l.tail);
}

void IpcBackend::State::enqueue(const Step& s, Stream& current) {
  Lane& l = *s.lane;
  Stream& on = *l.stream;
  dev->wait(on, *ready);
  follow(l, on, &current);
  l.on = &on;
  announce(on, s);
  transfer(on, s);
  await(on, s);
}

void IpcBackend::State::importPage(int peer, const Table& table) {
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

void IpcBackend::State::importBlock(int peer, int slot, const ipc::Offer& offer) {
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

std::string IpcBackend::State::exportError(const ShareItem& item, const std::string& what) const {
  return fmt::format("'{}' (allocation #{}, {} rank {}): {}", item.name, item.alloc,
                     direction(item.type), item.peer, what);
}

// Every counter of our page for a peer to 2^30 past the latest message
// number posted with that peer, which satisfies each of our waits on it
// under the cyclic compare, (int32)(value - q) >= 0: streams stuck on a peer
// that will never signal then drain. Written as semaphores are (writeValue,
// not a fill: a wait may be polling the word, and only a semaphore write is
// an atomic store for it). Failure path only: the messages it releases
// carry no data.
void IpcBackend::State::unblock() {
  if (page == nullptr || control == nullptr || latest == nullptr || latest_eager == nullptr) return;
  // Counted waits compare with the device's numbers, which the host may not
  // know (a graph's replays): they end on the release word instead.
  if (counts != nullptr) dev->writeValue(*control, releaseWord(), 1);
  for (int p = 0; p < world; ++p) {
    const std::size_t i = static_cast<std::size_t>(p);
    const uint32_t v = latest[i].load(std::memory_order_relaxed) + (uint32_t{1} << 30);
    const uint32_t e = latest_eager[i].load(std::memory_order_relaxed) + (uint32_t{1} << 30);
    for (int k = 0; k < kSignals; ++k)
      if (k != kEagerPosted)  // a push waiting for its slot ends on kEagerFree (and not direct)
        dev->writeValue(*control, page + i * kSignals + k,
                        k == kEagerDone || k == kEagerFree ? e : v);
  }
}

void IpcBackend::State::shutdown() noexcept {
  if (dev == nullptr) return;
  std::vector<Stream*> all;
  std::vector<Event*> tails;  // of lanes whose last messages ran on a poster's stream
  for (auto* lanes : {&send_lanes, &recv_lanes})
    for (Lane& l : *lanes) {
      all.push_back(l.stream.get());
      if (l.on != nullptr && l.on != l.stream.get()) tails.push_back(l.tail.get());
    }
  all.push_back(join.get());
  for (auto& s : phased) all.push_back(s.get());
  for (auto& [on, a] : asides) all.push_back(a.stream.get());
  all.push_back(control.get());
  // All streams share one deadline: a stuck lane must not cost a timeout
  // per stream.
  auto drain = [&](Duration limit) {
    const auto start = std::chrono::steady_clock::now();
    bool ok = true;
    auto quietly = [&](auto&& fn) {
      try {
        fn();
      } catch (...) {
        ok = false;  // reported where the run failed
      }
    };
    for (Stream* s : all)
      if (s != nullptr) quietly([&] { dev->synchronize(*s, remainingOf(limit, start)); });
    for (Event* e : tails) quietly([&] { dev->synchronize(*e, remainingOf(limit, start)); });
    return ok;
  };
  // Our communications completed: by the protocol, no peer touches our page
  // or our exported blocks any more, and we touch none of theirs. After an
  // abort nothing is waited for: the run failed, and abort() released our
  // waits already.
  const bool clean = !aborted.load() && drain(ctx.timeout);
  if (!clean) {
    try {
      unblock();
    } catch (...) {
    }
    // Our own waits are released: the streams only finish what they are
    // doing (a failed device skips the rest).
    drain(kReleaseDrain);
  }
  send_lanes.clear();
  recv_lanes.clear();
  join.reset();
  phased.clear();
  asides.clear();
  control.reset();
  joined.reset();
  ready.reset();
  if (!clean) return;  // a peer may still write into our page: leave it, and its mappings
  try {
    for (const std::vector<Import>& of_peer : imports)
      for (const Import& im : of_peer)
        if (im.ptr != nullptr && !im.own) dev->closeImported(im.ptr);
    for (void* p : retired) dev->closeImported(p);
    for (void* p : mapped_pages) dev->closeImported(p);
    dev->deallocate(page);
    if (counts != nullptr) dev->deallocate(counts);
  } catch (...) {
    // Teardown goes on; the device reports its own failures at the next use.
  }
}

IpcBackend::IpcBackend() : state_(std::make_unique<State>()) {}

IpcBackend::~IpcBackend() { state_->shutdown(); }

// Point-to-point messages through peer-mapped memory of the host or cuda
// device, every dtype, on one node. "auto" never picks it: its
// communications need handles exchanged, which a program asks for by naming
// it.
BackendCaps IpcBackend::caps() {
  BackendCaps c;
  c.name = "ipc";
  c.devices = {"host", "cuda"};
  c.types = {CommType::Send,      CommType::Recv,      CommType::Allgather, CommType::Broadcast,
             CommType::Alltoall,  CommType::Allreduce, CommType::ReduceScatter};
  c.dtypes = EnumSet<DType>::all(kDTypeNames);
  c.reduce_ops = EnumSet<ReduceOp>::all(kReduceOpNames);
  c.protocols = {Protocol::Put, Protocol::Get, Protocol::Eager};
  c.resolve_protocol = &ipcResolveProtocol;
  c.maps_peer_memory = true;
  c.collective_messages = &ipcCollectiveMessages;
  c.same_node_only = true;
  c.post_order = PostOrder::kPerPeer;  // one lane per ordered pair of ranks
  c.rank_spaces = {RankSpace::Processes};  // CUDA IPC handles do not open in their exporter
  c.capturable = true;  // in graph mode its message numbers are counted on the device
  c.auto_priority = 0;
  return c;
}

namespace {

// What every rank must have alike for its eager messages to land where its
// peers look: the limits (from the environment) and the slots made of them.
struct EagerLayout {
  uint64_t max, send_max, slots, lines, slot_bytes, ring;
};

// Every rank has the same eager layout, or setup fails on every rank saying
// which rank differs and in what (an allgather of each rank's layout).
void agreeOnEagerSlots(Bootstrap& boot, const EagerLayout& mine) {
  std::vector<EagerLayout> all(static_cast<std::size_t>(boot.world()));
  boot.allgather(&mine, all.data(), sizeof mine);
  for (int r = 0; r < boot.world(); ++r) {
    const EagerLayout& theirs = all[static_cast<std::size_t>(r)];
    HIR_CHECK_AS(UsageError, theirs.max == mine.max && theirs.slots == mine.slots,
                 "ipc: HIR_IPC_EAGER_MAX and HIR_IPC_EAGER_SLOTS must be the same on every rank: "
                 "rank {} has {} and {}, rank {} has {} and {}",
                 boot.rank(), mine.max, mine.slots, r, theirs.max, theirs.slots);
    HIR_CHECK_AS(UsageError, theirs.send_max == mine.send_max,
                 "ipc: HIR_IPC_EAGER_SEND_MAX must be the same on every rank: rank {} sends "
                 "eagerly up to {} bytes, rank {} up to {}",
                 boot.rank(), mine.send_max, r, theirs.send_max);
    HIR_CHECK_AS(UsageError, theirs.lines == mine.lines,
                 "ipc: eager messages in lines go up to {} bytes on rank {} and up to {} on rank "
                 "{}: HIR_IPC_INLINE_MAX (and, on GPUs, HIR_CUDA_KERNEL_COPY_MAX, which bounds "
                 "it) must be the same on every rank",
                 mine.lines, boot.rank(), theirs.lines, r);
    HIR_CHECK_AS(ProgramError, theirs.slot_bytes == mine.slot_bytes && theirs.ring == mine.ring,
                 "ipc: rank {} made {} eager slots of {} bytes and rank {} made {} of {}, sized "
                 "for the largest eager send of the program each loaded: every rank must load "
                 "the same program",
                 boot.rank(), mine.ring, mine.slot_bytes, r, theirs.ring, theirs.slot_bytes);
  }
}

}  // namespace

void IpcBackend::setup(const BackendContext& ctx) {
  State& st = *state_;
  HIR_INTERNAL_ASSERT(ctx.device != nullptr && ctx.bootstrap != nullptr,
                      "ipc backend setup without a device or bootstrap");
  HIR_INTERNAL_ASSERT(st.dev == nullptr, "ipc backend set up twice");
  Device& d = *ctx.device;
  Support s = supports(caps(), SupportQuery{d.kind(), CommType::Send});
  HIR_CHECK_AS(BackendError, s.ok, "{}", s.why);
  HIR_CHECK_AS(BackendError,
               d.supports(DeviceFeature::Ipc) && d.supports(DeviceFeature::StreamSemaphore),
               "the ipc backend needs memory export/import and stream semaphores, which device {} "
               "does not offer",
               d.describe());
  st.ctx = ctx;
  st.rank = ctx.bootstrap->rank();
  st.world = ctx.bootstrap->world();
  st.nodes = ctx.bootstrap->nodes();  // collective, like setup itself
  st.dev = &d;
  device_ = &d;
  // The eager slots: the same size and number on every rank, or the
  // messages would land in different places.
  st.eager_max = ipcEagerMaxBytes();
  const uint32_t asked_slots = ipcEagerSlots();
  const std::size_t send_max = ipcEagerSendMaxBytes();
  const IpcEagerSlots slots = ipcEagerSlotsFor(ctx.largest_eager_send);
  st.slot_bytes = std::max<std::size_t>(slots.bytes, 16);
  st.eager_slots = std::max<uint32_t>(slots.count, 1);
  // Lines take twice the message's bytes (rounded up to 4), in their
  // slot's line area.
  if (st.eager_max > 0 && d.supports(DeviceFeature::InlineFlags))
    st.inline_max = std::min({ipcInlineMaxBytes(), st.eager_max, d.inlineFlagsMax()});
  agreeOnEagerSlots(*ctx.bootstrap, EagerLayout{st.eager_max, send_max, asked_slots,
                                                st.inline_max, st.slot_bytes, st.eager_slots});
  HIR_LOG_DEBUG(Subsys::Ipc, "eager slots: {} per sender of {} bytes ({})", st.eager_slots,
                st.slot_bytes,
                ctx.largest_eager_send < 0
                    ? std::string("the program's largest eager send is unknown: "
                                  "HIR_IPC_EAGER_SEND_MAX's size")
                    : fmt::format("the program's largest eager send: {} bytes",
                                  ctx.largest_eager_send));
  st.direct = ipcDirect();
  st.push_steps = ipcPushSteps();
  const std::size_t counters = static_cast<std::size_t>(st.world) * kSignals * sizeof(uint32_t);
  const std::size_t rows = static_cast<std::size_t>(st.world) * st.eager_slots;
  const std::size_t marks = st.eager_max > 0 ? rows * sizeof(uint32_t) : 0;
  auto aligned = [](std::size_t n) { return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign; };
  st.marks_offset = counters;
  st.slots_offset = aligned(counters + marks);
  st.line_bytes = st.inline_max > 0 ? aligned(inlineLineBytes(st.inline_max)) : 0;
  st.slot_stride = st.slot_bytes + st.line_bytes;
  // Device memory starts zeroed (Device::allocate): no line holds a flag
  // before its first message.
  st.page_bytes = st.slots_offset + (st.eager_max > 0 ? rows * st.slot_stride : 0);
  st.control = d.createStream();
  st.join = d.createStream();
  st.phased.resize(ctx.teams.size());
  st.ready = d.createEvent();
  st.joined = d.createEvent();
  st.peer_pages.assign(static_cast<std::size_t>(st.world), nullptr);
  st.imports.resize(static_cast<std::size_t>(st.world));
  st.wave_load.resize(static_cast<std::size_t>(st.world));
  st.send_lanes.resize(static_cast<std::size_t>(st.world));
  st.recv_lanes.resize(static_cast<std::size_t>(st.world));
  // HIR_IPC_SEQ_START (a test's): message numbers start past it, so that a
  // test reaches the wrap at 2^32 in a few messages. The same on every rank.
  st.seq_start = static_cast<uint32_t>(
      envInteger("HIR_IPC_SEQ_START", st.seq_start, 0, std::numeric_limits<uint32_t>::max()));
  st.latest = std::make_unique<std::atomic<uint32_t>[]>(static_cast<std::size_t>(st.world));
  st.latest_eager = std::make_unique<std::atomic<uint32_t>[]>(static_cast<std::size_t>(st.world));
  for (int p = 0; p < st.world; ++p) {
    st.latest[static_cast<std::size_t>(p)].store(st.seq_start);
    st.latest_eager[static_cast<std::size_t>(p)].store(st.seq_start);
  }
  for (auto* lanes : {&st.send_lanes, &st.recv_lanes})
    for (Lane& l : *lanes) l.eager = st.seq_start;
  // Device memory (a peer maps it): every counter starts at the number
  // before the first message's, seq_start + 1.
  st.page = static_cast<uint32_t*>(d.allocate(st.page_bytes));
  d.fill(*st.control, st.page, DType::Int32, static_cast<std::size_t>(st.world) * kSignals,
         static_cast<int32_t>(st.seq_start), 0);
  // Counted mode: the lane counters start where the page does; the release
  // word at 0.
  // HIR_IPC_COUNTED=1: counted without graph mode (a test's, so that the
  // host device runs the protocol graphs use).
  st.counted = ctx.graph || envSwitch("HIR_IPC_COUNTED", "count message numbers on the device");
  if (st.counted)
    HIR_CHECK_AS(BackendError, d.supports(DeviceFeature::CountedSemaphore),
                 "ipc in graph mode needs counted semaphores, which device {} does not offer",
                 d.describe());
  if (st.counted || st.inline_max > 0) {
    st.counts = static_cast<uint32_t*>(
        d.allocate((4 * static_cast<std::size_t>(st.world) + 1) * sizeof(uint32_t)));
    d.fill(*st.control, st.counts, DType::Int32, 4 * static_cast<std::size_t>(st.world),
           static_cast<int32_t>(st.seq_start), 0);
    d.fill(*st.control, st.releaseWord(), DType::Int32, 1, 0, 0);
  }
  d.synchronize(*st.control, ctx.timeout);
  HIR_LOG_DEBUG(Subsys::Ipc, "message numbers {}",
                st.counted ? "counted on the device" : "from the host");
}

void IpcBackend::post(std::span<const PostArgs> ops, Stream& current, Event& done) {
  State& st = *state_;
  HIR_INTERNAL_ASSERT(st.dev != nullptr, "ipc backend posted to before setup()");
  HIR_INTERNAL_ASSERT(!ops.empty(), "ipc: empty post");
  st.checkNotAborted(ops);
  Device& d = *st.dev;
  // Posts re-record the shared events and may create a pair's stream.
  std::lock_guard lock(st.post_mutex);
  // A collective: its phases on its team's stream, after `current`.
  const auto first = std::find_if(ops.begin(), ops.end(),
                                  [](const PostArgs& a) { return !isPointToPoint(a.type); });
  if (first != ops.end()) {
    d.record(*st.ready, current);
    std::unique_ptr<Stream>& on = st.phased[static_cast<std::size_t>(first->team)];
    if (!on) on = d.createStream();
    d.wait(*on, *st.ready);
    st.enqueueOnStream(ops, *on, &current);
    d.record(done, *on);
    return;
  }
  // One message, the usual case: no allocation on the way.
  if (ops.size() == 1) {
    const Step s = st.resolve(ops[0]);
    d.record(*st.ready, current);
    st.enqueue(s, current);
    d.record(done, *s.lane->stream);
    return;
  }
  Work& w = st.work;
  w.clear();
  for (const PostArgs& a : ops) w.steps.push_back(st.resolve(a));
  st.enqueueDetached(w, current, done);
}

// Each step on its lane's stream after `current`; a group's `done` on a
// stream of its own, so that no later message queues behind the group's
// other messages.
void IpcBackend::State::enqueueDetached(Work& w, Stream& current, Event& done) {
  dev->record(*ready, current);
  w.lanes.clear();
  for (const Step& s : w.steps) {
    enqueue(s, current);
    addLane(w.lanes, s.lane);
  }
  for (Lane* l : w.lanes) {
    dev->record(*joined, *l->stream);
    dev->wait(*join, *joined);
  }
  dev->record(done, *join);
}

namespace {

// Counted mode, for the phases of enqueuePhased(): the k-th message of a
// lane in `steps` is number *counter + k, and the lane's last part enqueued
// (its last wait if it has a side that does not copy, else its last copy
// or reduction source, which the middle phase enqueues in step order)
// advances the counter past them all.
void countInGroup(std::vector<Step>& steps,
                  std::vector<std::pair<uint32_t*, uint32_t>>& n) {  // counter -> messages so far
  n.clear();
  for (Step& s : steps) {
    auto it = std::find_if(n.begin(), n.end(), [&](const auto& e) { return e.first == s.counter; });
    if (it == n.end()) it = n.insert(n.end(), {s.counter, 0});
    s.offset = ++it->second;
    s.advance = 0;
  }
  for (auto& [counter, total] : n) {
    Step* last = nullptr;
    for (Step& s : steps)
      if (s.counter == counter && (last == nullptr || !s.copies || last->copies)) last = &s;
    last->advance = total;
  }
}

// Whether [a, a + an) and [b, b + bn) share a byte.
bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

}  // namespace

// First the signals of the sides that do not copy, then the local copies
// (from kAsideCopyMin bytes on a stream beside `on`, joined after the last
// waits); then, in step order, the copies (each after its peer's signal;
// consecutive puts and gets as one message step) and the reductions (each
// where its first source comes, after its sources' signals); then the
// remaining waits. A reduction or a copy waits only for
// signals that its peers' posts give before any of their own waits, so a
// group whose messages form a ring, or a collective, cannot deadlock. Step
// order keeps each lane's signals in the order of its message numbers (a
// counter must never go back), and a collective's reduction before the
// copies of what it reduced (its get messages come before its put
// messages).
void IpcBackend::State::enqueuePhased(Work& w, Stream& on, const Stream* covered) {
  if (counted) countInGroup(w.steps, w.per_counter);
  for (Lane* l : w.lanes) follow(*l, on, covered);
  const bool one_step = oneStep(w), only_eager = !one_step && onlyEager(w);
  if (one_step) reduce(on, w, 0, true);
  if (only_eager) messageSteps(on, w);
  if (one_step || only_eager) {
    for (Lane* l : w.lanes) {
      dev->record(*l->tail, on);
      l->on = &on;
    }
    return;
  }
  // The peers wait for these signals, then for the eager sends (which wait
  // only for earlier posts' messages, see eagerLoad()). Every signal goes
  // first: an eager send may wait for its slot, which the peer frees only
  // once its own post got past a put that waits for one of our signals.
  // The local copies touch only the member's own chunk, which no peer
  // reads or writes.
  for (const Step& s : w.steps)
    if (!s.early) announce(on, s);
  for (const Step& s : w.steps)
    if (s.early) transfer(on, s);
  std::size_t local_bytes = 0;
  for (const LocalCopy& c : w.copies) local_bytes += c.bytes;
  Aside* aside = nullptr;
  if (local_bytes >= kAsideCopyMin) {
    aside = &asides[&on];
    if (!aside->stream) {
      aside->stream = dev->createStream();
      aside->forked = dev->createEvent();
      aside->done = dev->createEvent();
    }
    dev->record(*aside->forked, on);
    dev->wait(*aside->stream, *aside->forked);
  }
  for (const LocalCopy& c : w.copies)
    dev->copy(aside != nullptr ? *aside->stream : on, c.dst, c.src, c.bytes);
  if (aside != nullptr) dev->record(*aside->done, *aside->stream);
  for (std::size_t u = 0; u < w.units.size(); ++u)
    if (w.units[u].first_step < 0) reduce(on, w, static_cast<int>(u));  // a team of one
  // This side's consecutive puts and gets are one message step of pushes,
  // which a device may move at once (cuda: one grid, each push on its own
  // link): each waits only for its peer's first signals, never for this
  // post's work. A transfer that reads or writes what an earlier one of the
  // step writes (a scatter-allgather broadcast forwards what its get
  // brought) starts the next step, behind it.
  MessageStep pushes;
  pushes.release = stepRelease();
  auto flush = [&] {
    if (pushes.push_count > 0) dev->messageStep(on, pushes);
    pushes.push_count = 0;
  };
  auto follows = [&](const Step& s) {
    for (std::size_t i = 0; i < pushes.push_count; ++i) {
      const MessageStep::Copy& c = pushes.pushes[i];
      if (overlaps(s.src, s.bytes, c.dst, c.bytes) || overlaps(s.dst, s.bytes, c.dst, c.bytes) ||
          overlaps(s.dst, s.bytes, c.src, c.bytes))
        return true;
    }
    return false;
  };
  for (std::size_t k = 0; k < w.steps.size(); ++k) {
    const Step& s = w.steps[k];
    if (s.early || (s.unit < 0 && !s.copies)) continue;
    if (s.unit < 0 && !s.eager && push_steps) {
      if (pushes.push_count == pushes.pushes.size() || follows(s)) flush();
      pushes.pushes[pushes.push_count++] = copyOf(s, pushes);
      continue;
    }
    flush();
    if (s.unit < 0)
      transfer(on, s);
    else if (w.units[static_cast<std::size_t>(s.unit)].first_step == static_cast<int>(k))
      reduce(on, w, s.unit);
  }
  flush();
  for (const Step& s : w.steps) await(on, s);
  if (aside != nullptr) dev->wait(on, *aside->done);
  for (Lane* l : w.lanes) {
    dev->record(*l->tail, on);
    l->on = &on;
  }
}

template <class Fn>
void IpcBackend::State::forEachEagerSend(const PostArgs& a, Fn&& fn) const {
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

uint32_t IpcBackend::State::eagerLoad(std::span<const PostArgs> ops) {
  std::fill(wave_load.begin(), wave_load.end(), 0);
  uint32_t most = 0;
  for (const PostArgs& a : ops)
    forEachEagerSend(a, [&](int peer) {
      most = std::max(most, ++wave_load[static_cast<std::size_t>(peer)]);
    });
  return most;
}

void IpcBackend::State::enqueueOnStream(std::span<const PostArgs> ops, Stream& on,
                                           const Stream* covered) {
  Work& w = work;
  w.clear();
  if (eagerLoad(ops) <= eager_slots) {
    for (const PostArgs& a : ops) add(a, w);
    return enqueuePhased(w, on, covered);
  }
  const auto collective = std::find_if(ops.begin(), ops.end(),
                                       [](const PostArgs& a) { return !isPointToPoint(a.type); });
  for (const PostArgs& a : ops)
    if (isPointToPoint(a.type))
      throw ProgramError(fmt::format(
          "ipc: {}: a group with a collective and more eager messages to one peer than its {} "
          "slots (HIR_IPC_EAGER_SLOTS, or fewer when the program's largest eager send makes "
          "them large: HIR_IPC_EAGER_SEND_MAX), and a {} ({}) that a wave of the group could "
          "leave waiting; give the sends and recvs protocol 'put', or post the collective apart",
          collective->path, eager_slots, toString(a.type), a.path));
  // Every member cuts its group at the same ops: a collective's eager
  // sends are the same on every member (one per peer).
  std::fill(wave_load.begin(), wave_load.end(), 0);
  for (const PostArgs& a : ops) {
    bool fits = true;
    forEachEagerSend(a, [&](int peer) {
      if (wave_load[static_cast<std::size_t>(peer)] + 1 > eager_slots) fits = false;
    });
    if (!fits) {
      enqueuePhased(w, on, covered);
      w.clear();
      covered = nullptr;  // the lanes' last messages ran on `on`
      std::fill(wave_load.begin(), wave_load.end(), 0);
    }
    forEachEagerSend(a, [&](int peer) { ++wave_load[static_cast<std::size_t>(peer)]; });
    add(a, w);
  }
  enqueuePhased(w, on, covered);
}

// Everything on `current` (enqueuePhased), unless a lane has more eager
// sends than slots: then, without a collective, as post() does (each lane
// on its own stream).
bool IpcBackend::postJoined(std::span<const PostArgs> ops, Stream& current, Event& done) {
  State& st = *state_;
  HIR_INTERNAL_ASSERT(st.dev != nullptr, "ipc backend posted to before setup()");
  HIR_INTERNAL_ASSERT(!ops.empty(), "ipc: empty post");
  st.checkNotAborted(ops);
  std::lock_guard lock(st.post_mutex);
  const bool collective = std::any_of(ops.begin(), ops.end(),
                                      [](const PostArgs& a) { return !isPointToPoint(a.type); });
  if (collective || st.eagerLoad(ops) <= st.eager_slots) {
    st.enqueueOnStream(ops, current, nullptr);
    return true;  // no `done`: the lanes' tails order later messages
  }
  Work& w = st.work;
  w.clear();
  for (const PostArgs& a : ops) w.steps.push_back(st.resolve(a));
  st.enqueueDetached(w, current, done);
  return false;
}

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

// From any thread (the evaluator's watchdog): touches only the page, through
// the device, which is thread-safe.
void IpcBackend::abort() {
  HIR_LOG_INFO(Subsys::Ipc, "aborted: releasing this rank's semaphore waits");
  state_->aborted.store(true);
  try {
    state_->unblock();
  } catch (...) {
  }
}

void IpcBackend::setCapturing(bool) {
  State& st = *state_;
  std::lock_guard lock(st.post_mutex);
  HIR_INTERNAL_ASSERT(st.counted, "ipc: a graph capture without graph mode at setup (its message "
                      "numbers would repeat in every replay)");
  for (auto* lanes : {&st.send_lanes, &st.recv_lanes})
    for (Lane& l : *lanes) l.on = nullptr;
}

int64_t IpcBackend::exchanges() const { return state_->exchanges; }
std::size_t IpcBackend::eagerSlotBytes() const { return state_->slot_bytes; }
uint32_t IpcBackend::eagerSlots() const { return state_->eager_slots; }

void registerIpcBackend() {
  registerBackend({IpcBackend::caps(), [] { return std::make_unique<IpcBackend>(); }});
}

}  // namespace hir
