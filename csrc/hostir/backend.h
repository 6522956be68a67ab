// The communication backend interface, and the registry of backends by name
// ("nccl", "ipc", "mpi", "local", and any an embedder registers). The
// evaluator holds Backend& and calls post() and wait(); it never asks which
// backend it holds.
// Backends never see JSON: they get resolved pointers, counts and ranks.
//
// A backend describes itself once, as data (BackendCaps: the device kinds,
// communication types, dtypes, reduce ops and protocols it handles, whether
// it maps peer memory); JSON loading, validation and lowering ask that, never
// the backend's name.
//
// Required: BackendCaps, setup(), post().
// Optional, with defaults: postJoined() (a post waited for right away, run on
// the caller's stream without a completion event; default: post()), wait()
// (stream/host wait on the done event), shareMemHandles() (only for a
// backend whose caps say maps_peer_memory; default: none to exchange),
// abort() (what a failed run calls), setCapturing() (graph capture, for a
// backend whose caps say capturable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/settings.h>
#include <hostir/types.h>
#include <hostir/device.h>

namespace hir {

struct CollectivePiece;

// One communication, fully resolved for this rank and this post.
struct PostArgs {
  CommType type = CommType::Allreduce;
  DType dtype = DType::Float32;
  ReduceOp reduce = ReduceOp::Sum;
  const void* input = nullptr;  // collectives; send: the tensor
  void* output = nullptr;       // collectives; recv: the tensor
  // Elements per rank's chunk: allgather, gather: input count; reduce_scatter,
  // scatter: output count; allreduce, broadcast, reduce: the count;
  // alltoall: input count / team size; send, recv: the tensor's count.
  std::size_t count = 0;
  int team = 0;   // index into BackendContext::teams (0 is the world)
  int root = 0;   // team rank of the root (rooted collectives)
  int peer = -1;  // world rank (send, recv)
  // send/recv, on a backend with protocols: as the node says, except on a
  // backend that maps peer memory, where the evaluator passes the trace's
  // (auto resolved by BackendCaps::resolve_protocol).
  Protocol protocol = Protocol::Auto;
  // For backends that cache per communication or allocation:
  int comm = -1;                   // communication slot in the plan
  int input_alloc = -1, output_alloc = -1;  // allocation slots
  std::size_t input_offset = 0, output_offset = 0;  // bytes from allocation start
  const char* path = "";           // node path, for error messages
  // Only for send/recv on a backend that maps peer memory
  // (BackendCaps::maps_peer_memory); left as is for every other backend.
  // Filled by the evaluator from the load-time trace.
  struct PeerEnd {
    int alloc = -1;           // the peer's allocation slot for this message
    std::size_t offset = 0;   // and byte offset in it
    // The 1-based number of this message among the messages of its ordered
    // pair (sender, receiver) on such backends over every run so far: the
    // same number on both sides.
    uint64_t pair_seq = 0;
  } remote;
  // Only for a collective on a backend that runs collectives as messages
  // (BackendCaps::collective_messages): this rank's messages of it, in the
  // order that function lists them, each with its peer's end, filled by the
  // evaluator from the load-time trace as for a send or recv.
  std::span<const CollectivePiece> pieces;
};

// A collective that a backend runs as point-to-point messages between the
// members of its team (BackendCaps::collective_messages), as one member
// sees it.
struct CollectiveShape {
  CommType type = CommType::Allreduce;
  DType dtype = DType::Float32;
  std::size_t count = 0;  // PostArgs::count
  int team_size = 1;
  int me = 0;             // this member's team rank
  int root = 0;           // team rank of the root (rooted types)
  bool in_place = false;  // the input and the output are the same elements on this member
  friend bool operator==(const CollectiveShape&, const CollectiveShape&) = default;
};

// One message of such a collective. Offsets and counts are in elements.
struct CollectiveMessage {
  int from = 0, to = 0;         // team ranks, never equal; one of them is the member's
  bool from_output = false;     // the sender's data lies in its output (else its input)
  std::size_t from_offset = 0;  // into the sender's tensor
  std::size_t to_offset = 0;    // into the receiver's output
  std::size_t count = 0;
  // put: the sender copies into the receiver's output; get: the receiver
  // reads the sender's tensor (and copies or reduces it into its output).
  Protocol protocol = Protocol::Put;
};

// A message of a collective with the peer's end of it (the receiver's
// output under put, the sender's tensor under get, for the side that maps
// it; both sides get the number).
struct CollectivePiece {
  CollectiveMessage message;
  PostArgs::PeerEnd peer;
  int peer_rank = -1;  // world rank of the other member
};

// Lists into `out` (cleared first), in order, the messages that member
// `shape.me` sends or receives: the k-th message from a to b in a's list is
// the k-th from a to b in b's list. Returns the algorithm's name ("copies",
// "one-shot", ...): every member of a team must pick the same. Throws
// ProgramError when the backend cannot run that collective (say why).
// `settings`: the session's (a backend's limits, e.g. ipc's eager sizes).
using CollectiveMessagesFn = std::string_view (*)(const CollectiveShape& shape,
                                                  const Settings& settings,
                                                  std::vector<CollectiveMessage>& out);

// The protocol a send/recv of `bytes` that asks for `asked` runs on a
// backend with protocols: "auto" resolved by size (ipc: eager up to
// HIR_IPC_EAGER_SEND_MAX, put above), any other as asked; throws ProgramError
// when `asked` cannot carry that many bytes (ipc's eager). The same answer
// on every rank for the same size: the cross-rank check, the load-time
// trace and the posts (PostArgs::protocol) all take it from here.
using ResolveProtocolFn = Protocol (*)(const Settings& settings, Protocol asked, std::size_t bytes);

// Memory a backend sets aside on each rank for eager messages from each
// sender (ipc's eager slots): `count` slots of `bytes` per sender; none is
// 0 and 0.
struct EagerSlots {
  std::size_t bytes = 0;
  uint32_t count = 0;
};
// The eager slots a backend makes for a program whose largest eager send
// is `largest_eager_send` bytes (BackendContext::largest_eager_send; -1:
// unknown, then sized for the largest the backend allows).
using EagerSlotsFn = EagerSlots (*)(const Settings& settings, int64_t largest_eager_send);

struct BackendContext {
  Device* device = nullptr;
  Bootstrap* bootstrap = nullptr;
  // teams[i]: world ranks in team order; teams[0] is every rank in order.
  std::vector<std::vector<int>> teams;
  Duration timeout{300000};
  // Graph mode (EvaluatorOptions::graph): from the first run on, the posts
  // may be captured into a graph and replayed, so a capturable backend
  // whose work carries values that change from run to run (ipc's message
  // numbers) keeps them on the device from the start.
  bool graph = false;
  // The largest send or recv this backend carries with protocol eager in
  // one run, in bytes, from the load-time trace of the program's messages
  // (the same on every rank): 0 when it carries none; unknown (-1) when
  // the trace covers only a prefix of the run, or was not made. ipc sizes
  // its eager slots by it.
  int64_t largest_eager_send = -1;
  // The session's settings (<hostir/settings.h>): every rank has the same
  // value of those marked same_on_every_rank.
  Settings settings;
};

// A set of values of a small enum (bit i: the value whose underlying value
// is i).
template <class E>
class EnumSet {
 public:
  constexpr EnumSet() = default;
  constexpr EnumSet(std::initializer_list<E> values) {
    for (E v : values) bits_ |= bit(v);
  }
  // Every value of a table of names (types.h), e.g. all(kDTypeNames).
  template <std::size_t N>
  static constexpr EnumSet all(const std::pair<E, std::string_view> (&table)[N]) {
    EnumSet s;
    for (const auto& [v, name] : table) s.bits_ |= bit(v);
    return s;
  }
  constexpr bool has(E v) const { return (bits_ & bit(v)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }

 private:
  static constexpr uint32_t bit(E v) { return uint32_t{1} << static_cast<unsigned>(v); }
  uint32_t bits_ = 0;
};

// How a rank's posts on a backend wait for each other, as the deadlock
// search of the cross-rank check models it. On every backend a post starts
// only once the work enqueued before it on its stream is done, and it
// completes only once every peer started its side: a send is never assumed
// to complete before its recv was posted (an eager limit is the
// transport's, and a portable program does not rely on it). Besides:
// - kFree: nothing; posts never wait for each other.
// - kStartsInPostOrder: a rank's posts start one at a time, in the order
//   they were posted, whatever stream posted them; a start never waits for
//   a peer, and completions are independent (mpi, local: one start thread,
//   backends/host_post.h). A post whose stream waits holds back every later
//   post of the rank on the backend.
// - kPerPeer: the messages of one ordered pair of ranks run one after
//   another, each starting once the previous completed (ipc's lanes).
// - kPerRank: every operation of a rank starts only after the rank's
//   previous one on the backend completed, whatever its team, and waits
//   there for its peers (nccl: one stream per rank), so ranks must post
//   them in orders that agree.
enum class PostOrder : uint8_t { kFree, kStartsInPostOrder, kPerPeer, kPerRank };

// What a backend is and handles, said once. Validation and lowering bind
// communications by these answers alone.
struct BackendCaps {
  std::string name;                  // as JSON names it in "backend"
  std::vector<std::string> devices;  // device kinds it runs on ("host", "cuda")
  EnumSet<CommType> types;           // communication types
  EnumSet<DType> dtypes;             // element types it moves
  EnumSet<ReduceOp> reduce_ops;      // for allreduce, reduce_scatter, reduce
  // Protocols a send/recv may ask for besides "auto"; empty: the backend
  // takes no protocol, and a program that names one is wrong.
  EnumSet<Protocol> protocols;
  // Maps the peer's memory (ipc): its communications need share_mem_handles
  // (lowering inserts one when the program has none), and its send/recv
  // posts carry the peer's address (PostArgs::remote).
  bool maps_peer_memory = false;
  // Runs its collectives as messages between the members of the team, over
  // peer-mapped memory (ipc; needs maps_peer_memory): the cross-rank check
  // matches those messages with the pairs' sends and recvs, the load-time
  // trace gives each its peer's address (PostArgs::pieces), and
  // share_mem_handles exchanges their buffers. Null: its collectives are its
  // own business.
  CollectiveMessagesFn collective_messages = nullptr;
  // What a send/recv's protocol is by its size (null: auto is put).
  ResolveProtocolFn resolve_protocol = nullptr;
  // The eager slots it makes on each rank (null: none), for `hir check` to
  // say what memory a program's messages take.
  EagerSlotsFn eager_slots = nullptr;
  // Reaches only peers on its own node (a send/recv to another node is an
  // error of the cross-rank check).
  bool same_node_only = false;
  // How a rank's posts on it wait for each other (the deadlock search of the
  // cross-rank check follows it).
  PostOrder post_order = PostOrder::kFree;
  // Its posts may be captured into a graph and replayed (the evaluator's
  // graph mode, Backend::setCapturing): a post only enqueues device work,
  // never waits on the host, and a replay of that work repeats the post
  // correctly (nccl; ipc, whose message numbers are then counted on the
  // device: BackendContext::graph).
  bool capturable = false;
  // Can place the allocations its collectives use in memory of its own
  // (Backend::allocateSymmetric): nccl's symmetric windows (NCCL >= 2.27),
  // which NCCL's symmetric kernels need.
  bool symmetric_memory = false;
  // Preference of "auto" (higher first) among those that support a query;
  // below 1, "auto" never picks it.
  int auto_priority = 0;
  // Where the ranks it connects may live (Bootstrap::rankSpace()): mpi and
  // ipc need separate processes, local needs threads of one process, nccl
  // takes both. Default: both.
  EnumSet<RankSpace> rank_spaces{RankSpace::Processes, RankSpace::Threads};
  // Set only in a session's catalog (backendCatalog(bootstrap)): why this
  // backend cannot run with that session's bootstrap. supports() then says
  // no with this sentence. Empty: it can.
  std::string unavailable;
};

// What lowering asks before binding a communication to a backend.
struct SupportQuery {
  std::string_view device;  // "host" or "cuda"
  CommType type = CommType::Allreduce;
  DType dtype = DType::Float32;
  ReduceOp reduce = ReduceOp::Sum;
  Protocol protocol = Protocol::Auto;  // send/recv
  bool peer_on_other_node = false;     // send/recv whose peer is on another node
};

struct Support {
  bool ok = false;
  std::string why;  // when !ok: a sentence saying what is not supported
};

// The answer of `caps` to `q`, with a sentence saying why not.
Support supports(const BackendCaps& caps, const SupportQuery& q);

// An item of a share_mem_handles batch (ipc): communication `comm` of this
// rank moves data with `peer` through allocation `alloc` ([base, base+bytes)),
// and the peer's end of those messages is its allocation `peer_alloc`.
// `base` is null when the allocation has no memory yet on this rank.
struct ShareItem {
  int comm = -1;
  // Send or Recv: this rank's side of the messages (a collective's messages
  // too, whose communication has another type).
  CommType type = CommType::Send;
  int peer = -1;
  int alloc = -1;
  void* base = nullptr;
  std::size_t bytes = 0;
  int peer_alloc = -1;
  Protocol protocol = Protocol::Auto;
  bool caller_owned = false;  // `base` is a caller's buffer (bind()), not from Device::allocate
  const char* name = "";      // the allocation's name, for messages
  std::size_t largest_message = 0;  // bytes, of the item's messages in the load-time trace
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Collective over the world, once at load: create communicators for every
  // team in ctx.teams (ranks outside a team still take part in its creation).
  virtual void setup(const BackendContext& ctx) = 0;

  // Posts `ops` as one unit (a group when there are several) and never blocks
  // the host. The ops read their inputs only after the work enqueued so far
  // on `current` (record there, wait on the backend's stream); `done` is
  // recorded where the last of them completes.
  virtual void post(std::span<const PostArgs> ops, Stream& current, Event& done) = 0;

  // Optional fast path, for a post that `current` waits for right away: the
  // caller promises that its next step on `current` is a stream-mode wait on
  // the post (nothing else is enqueued on `current` in between) and that it
  // never waits on the post in any other way. A backend may then enqueue the
  // ops on `current` itself, saving the hand-offs to its own streams and
  // back, and return true: the ops are then part of `current`'s order, which
  // is the only completion signal. `done` is not recorded (saving an event
  // record per post), and the caller must not wait on it. The order of the
  // backend's own operations is kept across posts on different streams.
  // Returns false after posting as post() does, `done` recorded (the caller
  // then waits as usual); that is the default.
  // `current` must outlive the backend, whose teardown may wait for the
  // latest joined post on it.
  virtual bool postJoined(std::span<const PostArgs> ops, Stream& current, Event& done);

  // Default: Stream mode makes `current` wait on `done`; Host mode blocks on
  // `done` with `timeout`.
  virtual void wait(Event& done, Stream& current, WaitMode mode, Duration timeout);

  // Optional, for a backend whose caps say maps_peer_memory: collective
  // over the world; exchanges what `items` need. Called in program order on
  // every rank, never inside a post. The default accepts no items.
  virtual void shareMemHandles(std::span<const ShareItem> items);

  // Optional: makes pending operations fail or end instead of hanging
  // (ncclCommAbort; ipc releases its own semaphore waits; mpi abandons its
  // requests), and later posts fail; this rank only, the job goes on. The
  // evaluator calls it once a run failed (a timeout, an error), before its
  // teardown, and from its watchdog thread when the host made no progress
  // for the timeout, possibly while another call of the backend is blocked:
  // it must be callable from any thread, more than once. Teardown after it
  // must not wait for what it abandoned.
  virtual void abort();
  // Optional, for a backend whose caps say capturable: the evaluator is about
  // to capture the posts that follow into a graph on the device (true), or
  // has ended that capture (false). Everything posted before a capture has
  // completed (the host synchronized). During it, every stream a post
  // enqueues on must join the capture through an event recorded during it,
  // never wait on an event recorded before (CUDA forbids it), and nothing
  // may be synchronized or queried; after it, events recorded during the
  // capture must not be waited on or queried. A backend that remembers
  // which streams already saw which events forgets it at both calls.
  // Default: nothing to forget.
  virtual void setCapturing(bool capturing);
  // Optional, for a backend whose caps say symmetric_memory: `bytes` of
  // memory for an allocation that every rank allocates with the same size
  // and that collectives of the teams `teams` (indices into
  // BackendContext::teams) use. Called at load, after setup(), on every
  // rank in the same order (a collective over those teams, whose members
  // register the memory with them); the backend keeps the memory until its
  // teardown. Null: declined (the device allocates it as usual), the same
  // answer on every rank. Default: null.
  virtual void* allocateSymmetric(std::size_t bytes, std::span<const int> teams);

 protected:
  Device* device_ = nullptr;
};

// A registered backend: what it handles, and how to make one.
struct BackendInfo {
  BackendCaps caps;
  std::function<std::unique_ptr<Backend>()> create;
};

// Registers a backend under caps.name (UsageError if the name is taken or
// the info is incomplete). The built-ins (mpi, nccl with CUDA, ipc, local) are
// registered on first use of the registry; an embedder registers its own
// before building an Evaluator, and programs can then name it in JSON.
void registerBackend(BackendInfo info);
const std::vector<BackendInfo>& registeredBackends();
const BackendInfo* findBackend(std::string_view name);
// The caps of every registered backend, in registration order: what
// validation and lowering are given.
std::vector<BackendCaps> backendCatalog();
// The same, for a world of `bootstrap`: each backend whose rank_spaces lack
// the bootstrap's rankSpace() says why in `unavailable`. What an Evaluator
// compiles with, so that "auto" picks what can run and a backend named
// that cannot is an error naming the node.
std::vector<BackendCaps> backendCatalog(const Bootstrap& bootstrap);
// The same for ranks that live in `space` (what bootstrap.rankSpace()
// says), before any bootstrap exists (a launcher that checks a program for
// the ranks it will start).
std::vector<BackendCaps> backendCatalog(RankSpace space);

// Picks the backend of `catalog` for `requested` ("auto" or a name) or
// throws ProgramError, prefixed with `path`, saying why none fits (listing
// what each backend said).
const BackendCaps& selectBackend(std::span<const BackendCaps> catalog, std::string_view requested,
                                 const SupportQuery& q, std::string_view path);
const BackendCaps* findCaps(std::span<const BackendCaps> catalog, std::string_view name);

}  // namespace hir
