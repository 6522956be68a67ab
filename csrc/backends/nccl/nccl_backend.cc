// The NCCL backend (see nccl_backend.h). One file of about 770 lines: the
// communicators, the ordering of posts across streams and the mapping of
// every communication type onto NCCL calls share one state.
#include "backends/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/buffer_ranges.h"
#include "backends/nccl/nccl_types.h"
#include "backends/post_checks.h"
#include "common/check.h"
#include "common/log.h"
#include "device/cuda_interop.h"
#include <hostir/bootstrap.h>

// NCCL's symmetric windows (ncclMemAlloc + ncclCommWindowRegister with
// NCCL_WIN_COLL_SYMMETRIC) came with NCCL 2.27.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define HIR_NCCL_HAS_WINDOWS 1
#else
#define HIR_NCCL_HAS_WINDOWS 0
#endif

namespace hir {

namespace {

constexpr int kAutoPriority = 10;
// A host wait polls its event in slices of this length and asks the
// communicators for asynchronous errors (a peer gone, a network failure)
// between them, so that such an error ends the wait at once.
constexpr Duration kAsyncErrorPoll{20};
// Alignment of the pieces of the scratch buffer (CUDA's allocation alignment).
constexpr std::size_t kScratchAlignment = 256;

std::string_view functionName(const char* call) {
  std::string_view text(call);
  std::size_t paren = text.find('(');
  return paren == std::string_view::npos ? text : text.substr(0, paren);
}

[[noreturn]] void throwNcclError(ncclResult_t r, const char* call, int rank,
                                 std::string_view path) {
  const char* last = ncclGetLastError(nullptr);
  throw BackendError(fmt::format("nccl: {} failed on rank {} at {}: {}{}{}", functionName(call),
                                 rank, path.empty() ? "setup" : path, ncclGetErrorString(r),
                                 last && *last ? "; " : "", last ? last : ""));
}

inline void ncclCheck(ncclResult_t r, const char* call, int rank, std::string_view path) {
  if (r != ncclSuccess) throwNcclError(r, call, rank, path);
}

#define HIR_NCCL_CHECK(call, rank, path) ncclCheck((call), #call, (rank), (path))

// One team's communicator as seen by this rank.
struct TeamComm {
  ncclComm_t comm = nullptr;  // null: this rank is not a member
  int rank = -1;              // this rank's team rank (== communicator rank)
  int size = 0;
  bool owned = false;  // false when it reuses an earlier team's communicator
};

// ncclGroupStart now, ncclGroupEnd at end() or, after an exception, in the
// destructor (so the group depth stays balanced for the next post).
class Group {
 public:
  Group(int rank, std::string_view path) : rank_(rank), path_(path) {
    HIR_NCCL_CHECK(ncclGroupStart(), rank_, path_);
  }
  void end() {
    open_ = false;
    HIR_NCCL_CHECK(ncclGroupEnd(), rank_, path_);
  }
  ~Group() {
    if (open_) (void)ncclGroupEnd();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

 private:
  int rank_;
  std::string_view path_;
  bool open_ = true;
};

}  // namespace

struct NcclBackend::State {
  bool ready = false;  // setup() done
  int rank = -1;
  int world = 0;
  int ordinal = -1;
  Duration timeout{300000};
  std::vector<TeamComm> teams;
  cudaStream_t stream = nullptr;  // the backend's own stream
  cudaStream_t target = nullptr;  // where the current post's operations go

  // Where the latest post's operations went: null, the backend stream; else
  // a caller's stream (postJoined). The GPU must see one communicator's
  // operations in the order they were issued, so a post elsewhere first
  // waits for those, through laneEnd().
  cudaStream_t lane_on = nullptr;
  // Recorded on lane_on right after the latest joined post's operations when
  // lane_marked. That costs an event record per post, so it is done only
  // once posts came from more than one stream (several_streams).
  cudaEvent_t lane_mark = nullptr;
  bool lane_marked = false;
  bool several_streams = false;
  // Posts on the backend stream so far, and the caller stream that last
  // waited for all of them (through stream_tail) and how many there were.
  uint64_t stream_posts = 0;
  cudaStream_t tail_seen_by = nullptr;
  uint64_t tail_seen_posts = 0;
  cudaEvent_t stream_tail = nullptr;
  cudaEvent_t inputs_ready = nullptr;  // re-recorded by every post

  // Scratch for inputs that overlap outputs. Outgrown buffers may still be
  // read by enqueued work: they are kept until destruction.
#if HIR_NCCL_HAS_WINDOWS
  // allocateSymmetric(): the memory (ncclMemAlloc) and its windows, one per
  // team communicator it was registered with.
  struct Window {
    ncclComm_t comm;
    ncclWindow_t window;
  };
  std::vector<Window> windows;
  std::vector<void*> symmetric_memory;
#endif

  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  std::size_t scratch_used = 0;  // within the current post
  std::vector<void*> retired;

  std::atomic<bool> aborted{false};

  // The caller stream whose work the backend stream last joined (the
  // counter's identity, null: none or untracked) and its work count then.
  // While it has not changed, a post needs no new record + wait.
  const void* joined_stream = nullptr;
  uint64_t joined_work = 0;
  bool always_join = false;  // HIR_NCCL_ALWAYS_JOIN=1: never skip (diagnosis)

  void* scratchFor(std::size_t bytes, std::string_view path) {
    std::size_t offset = (scratch_used + kScratchAlignment - 1) / kScratchAlignment *
                         kScratchAlignment;
    if (scratch == nullptr || offset + bytes > scratch_bytes) {
      if (scratch) retired.push_back(scratch);
      scratch = nullptr;
      std::size_t capacity = std::max(bytes, 2 * scratch_bytes);
      cudaError_t err = cudaMalloc(&scratch, capacity);
      if (err != cudaSuccess) {
        scratch = nullptr;
        scratch_bytes = 0;
        (void)cudaGetLastError();
        throw BackendError(fmt::format(
            "nccl: cudaMalloc of a {}-byte scratch buffer failed on rank {} (device {}) at {}: "
            "{}",
            capacity, rank, ordinal, path, cudaGetErrorString(err)));
      }
      scratch_bytes = capacity;
      offset = 0;
    }
    scratch_used = offset + bytes;
    return bytesAt(scratch, offset);
  }

  // The buffer the op should read: `in` itself, or, when it overlaps `out`
  // other than in NCCL's in-place layout, a copy of it in scratch (enqueued on
  // the backend stream, so it runs before the op).
  const void* separate(const void* in, std::size_t in_bytes, const void* out,
                       std::size_t out_bytes, bool nccl_in_place, std::string_view path) {
    if (nccl_in_place || !overlaps(in, in_bytes, out, out_bytes)) return in;
    void* copy = scratchFor(in_bytes, path);
    copyOnStream(copy, in, in_bytes, path);
    return copy;
  }

  void copyOnStream(void* dst, const void* src, std::size_t bytes, std::string_view path) {
    if (bytes == 0 || dst == src) return;
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, target);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw BackendError(fmt::format("nccl: cudaMemcpyAsync of {} bytes failed on rank {} at {}: {}",
                                     bytes, rank, path, cudaGetErrorString(err)));
    }
  }

  const TeamComm& teamOf(const PostArgs& op, std::string_view path) const {
    // Send and recv name their peer by world rank: they use the world.
    int team = isPointToPoint(op.type) ? 0 : op.team;
    HIR_INTERNAL_ASSERT(team >= 0 && team < static_cast<int>(teams.size()),
                        "{}: nccl post of {} names team {}, but setup made {} team(s)", path,
                        toString(op.type), op.team, teams.size());
    const TeamComm& t = teams[team];
    HIR_INTERNAL_ASSERT(t.comm != nullptr,
                        "{}: rank {} posts a {} in team {}, of which it is not a member", path,
                        rank, toString(op.type), team);
    return t;
  }

  void enqueue(const PostArgs& op);
  // ops as one unit (a group when there are several) on `target`.
  void enqueueAll(std::span<const PostArgs> ops, std::string_view path) {
    scratch_used = 0;
    if (ops.size() == 1) {
      enqueue(ops[0]);
    } else if (ops.size() > 1) {
      Group group(rank, path);
      for (const PostArgs& op : ops) enqueue(op);
      group.end();
    }
  }
  void enqueueGather(const PostArgs& op, const TeamComm& t, std::string_view path);
  void enqueueScatter(const PostArgs& op, const TeamComm& t, std::string_view path);
  void enqueueAlltoall(const PostArgs& op, const TeamComm& t, std::string_view path);

  void setupTeams(const BackendContext& ctx);
  void connectPeers();
  // Waits for the work enqueued so far on the backend stream: false on
  // timeout; BackendError when CUDA reports an error.
  bool drainStream(Duration limit) {
    cudaEvent_t e = nullptr;
    HIR_CUDA_CHECK(ordinal, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    struct Destroy {
      cudaEvent_t e;
      ~Destroy() { (void)cudaEventDestroy(e); }
    } destroy{e};
    HIR_CUDA_CHECK(ordinal, cudaEventRecord(e, stream));
    return cuda::pollEvent(e, limit, ordinal);
  }
  // An event that a post on another stream than lane_on waits on to follow
  // the latest joined post's operations. Without a mark (the first switch
  // of streams), it is recorded on lane_on now: the new post then also
  // follows what the caller enqueued there since, all of it issued before
  // this post and so unable to wait for it. From then on posts are marked.
  cudaEvent_t laneEnd() {
    several_streams = true;
    if (!lane_marked) {
      HIR_CUDA_CHECK(ordinal, cudaEventRecord(lane_mark, lane_on));
      lane_marked = true;
    }
    return lane_mark;
  }
  // What post() and postJoined() do first: the checks, the device, and the
  // caller's stream.
  cuda::CudaStream& openPost(std::span<const PostArgs> ops, Stream& current) {
    checkPostable("nccl", ops, ready, aborted.load(), rank, "the communicators were aborted");
    cuda::activate(ordinal);
    return cuda::cudaStream(current, "nccl post");
  }
  void abortAll();
  // BackendError when a communicator reports an asynchronous error.
  void checkAsyncErrors() const;
  void release();
};

// ------------------------------------------------------------------- enqueue

void NcclBackend::State::enqueue(const PostArgs& op) {
  const std::string_view path = op.path ? op.path : "";
  const TeamComm& t = teamOf(op, path);
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  const std::size_t n = static_cast<std::size_t>(t.size);
  const std::size_t me = static_cast<std::size_t>(t.rank);
  if (hasRoot(op.type))
    HIR_INTERNAL_ASSERT(op.root >= 0 && op.root < t.size,
                        "{}: nccl {} root {} is outside the team of {} rank(s)", path,
                        toString(op.type), op.root, t.size);
  if (isPointToPoint(op.type))
    HIR_INTERNAL_ASSERT(op.peer >= 0 && op.peer < world,
                        "{}: nccl {} peer {} is outside the world of {} rank(s)", path,
                        toString(op.type), op.peer, world);
  const bool is_root = hasRoot(op.type) && op.root == t.rank;

  switch (op.type) {
    case CommType::Allreduce: {
      const void* in =
          separate(op.input, chunk, op.output, chunk, op.input == op.output, path);
      HIR_NCCL_CHECK(ncclAllReduce(in, op.output, op.count, dt, ncclOp(op.reduce), t.comm, target),
                     rank, path);
      return;
    }
    case CommType::Allgather: {
      const void* in = separate(op.input, chunk, op.output, n * chunk,
                                op.input == bytesAt(op.output, me * chunk), path);
      HIR_NCCL_CHECK(ncclAllGather(in, op.output, op.count, dt, t.comm, target), rank, path);
      return;
    }
    case CommType::ReduceScatter: {
      const void* in = separate(op.input, n * chunk, op.output, chunk,
                                op.output == bytesAt(op.input, me * chunk), path);
      HIR_NCCL_CHECK(
          ncclReduceScatter(in, op.output, op.count, dt, ncclOp(op.reduce), t.comm, target),
          rank, path);
      return;
    }
    case CommType::Broadcast: {
      // Only the root reads its input; elsewhere pass the output (the
      // in-place form), so that a null input is never handed to NCCL.
      const void* in = is_root ? separate(op.input, chunk, op.output, chunk,
                                          op.input == op.output, path)
                               : op.output;
      HIR_NCCL_CHECK(ncclBroadcast(in, op.output, op.count, dt, op.root, t.comm, target), rank,
                     path);
      return;
    }
    case CommType::Reduce: {
      // Only the root writes its output; elsewhere it may be null.
      const void* in = is_root ? separate(op.input, chunk, op.output, chunk,
                                          op.input == op.output, path)
                               : op.input;
      void* out = op.output ? op.output : const_cast<void*>(op.input);
      HIR_NCCL_CHECK(
          ncclReduce(in, out, op.count, dt, ncclOp(op.reduce), op.root, t.comm, target), rank,
          path);
      return;
    }
    case CommType::Gather: return enqueueGather(op, t, path);
    case CommType::Scatter: return enqueueScatter(op, t, path);
    case CommType::Alltoall: return enqueueAlltoall(op, t, path);
    case CommType::Send:
      HIR_NCCL_CHECK(ncclSend(op.input, op.count, dt, op.peer, t.comm, target), rank, path);
      return;
    case CommType::Recv:
      HIR_NCCL_CHECK(ncclRecv(op.output, op.count, dt, op.peer, t.comm, target), rank, path);
      return;
  }
  HIR_INTERNAL_ASSERT(false, "{}: nccl: unhandled communication type {}", path,
                      static_cast<int>(op.type));
}

// Root receives every member's chunk at output + r * chunk, its own through
// a send/recv to itself (NCCL copies it inside the group's kernel, which a
// separate memcpy would serialize with); the others send.
void NcclBackend::State::enqueueGather(const PostArgs& op, const TeamComm& t,
                                       std::string_view path) {
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  Group group(rank, path);
  if (op.root != t.rank) {
    HIR_NCCL_CHECK(ncclSend(op.input, op.count, dt, op.root, t.comm, target), rank, path);
  } else {
    const std::size_t n = static_cast<std::size_t>(t.size);
    void* own = bytesAt(op.output, static_cast<std::size_t>(t.rank) * chunk);
    const void* in = separate(op.input, chunk, op.output, n * chunk, op.input == own, path);
    for (int r = 0; r < t.size; ++r) {
      void* dst = bytesAt(op.output, static_cast<std::size_t>(r) * chunk);
      if (r == t.rank) {
        if (in == dst) continue;  // in place
        HIR_NCCL_CHECK(ncclSend(in, op.count, dt, r, t.comm, target), rank, path);
      }
      HIR_NCCL_CHECK(ncclRecv(dst, op.count, dt, r, t.comm, target), rank, path);
    }
  }
  group.end();
}

// Root sends input + r * chunk to every member, itself included unless in
// place; the others receive.
void NcclBackend::State::enqueueScatter(const PostArgs& op, const TeamComm& t,
                                        std::string_view path) {
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  Group group(rank, path);
  if (op.root != t.rank) {
    HIR_NCCL_CHECK(ncclRecv(op.output, op.count, dt, op.root, t.comm, target), rank, path);
  } else {
    const std::size_t n = static_cast<std::size_t>(t.size);
    const std::size_t own = static_cast<std::size_t>(t.rank) * chunk;
    // An output that overlaps another member's chunk would be overwritten
    // while that chunk is sent: such an input is staged.
    const void* in = separate(op.input, n * chunk, op.output, chunk,
                              op.output == bytesAt(op.input, own), path);
    for (int r = 0; r < t.size; ++r) {
      const void* src = bytesAt(in, static_cast<std::size_t>(r) * chunk);
      if (r == t.rank) {
        if (src == op.output) continue;  // in place
        HIR_NCCL_CHECK(ncclRecv(op.output, op.count, dt, r, t.comm, target), rank, path);
      }
      HIR_NCCL_CHECK(ncclSend(src, op.count, dt, r, t.comm, target), rank, path);
    }
  }
  group.end();
}

// Every member sends input + r * chunk to r and receives r's chunk at
// output + r * chunk, itself included (as nccl-tests does). In place (or any
// overlap) reads from a staged copy of the input.
void NcclBackend::State::enqueueAlltoall(const PostArgs& op, const TeamComm& t,
                                         std::string_view path) {
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  const std::size_t n = static_cast<std::size_t>(t.size);
  const void* in = separate(op.input, n * chunk, op.output, n * chunk, false, path);
  Group group(rank, path);
  for (int r = 0; r < t.size; ++r) {
    const std::size_t offset = static_cast<std::size_t>(r) * chunk;
    HIR_NCCL_CHECK(ncclSend(bytesAt(in, offset), op.count, dt, r, t.comm, target), rank, path);
    HIR_NCCL_CHECK(ncclRecv(bytesAt(op.output, offset), op.count, dt, r, t.comm, target), rank,
                   path);
  }
  group.end();
}

// --------------------------------------------------------------------- setup

namespace {

// What rank 0 broadcasts: the unique id, or why it could not make one (so
// that the other ranks fail too instead of waiting forever in init).
struct IdMessage {
  int ok = 0;
  char error[400] = {};
  ncclUniqueId id{};
};

void checkTeams(const BackendContext& ctx, int world) {
  HIR_INTERNAL_ASSERT(!ctx.teams.empty(), "nccl setup: no teams (teams[0] must be the world)");
  HIR_INTERNAL_ASSERT(static_cast<int>(ctx.teams[0].size()) == world,
                      "nccl setup: teams[0] has {} ranks, the world {}", ctx.teams[0].size(),
                      world);
  for (int r = 0; r < world; ++r)
    HIR_INTERNAL_ASSERT(ctx.teams[0][r] == r, "nccl setup: teams[0] is not the world in order");
  for (std::size_t t = 0; t < ctx.teams.size(); ++t) {
    std::vector<int> sorted = ctx.teams[t];
    std::sort(sorted.begin(), sorted.end());
    HIR_INTERNAL_ASSERT(!sorted.empty() && sorted.front() >= 0 && sorted.back() < world &&
                            std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                        "nccl setup: team {} is not a set of distinct ranks of the world", t);
  }
}

// NCCL needs a GPU of its own for each rank: two ranks on one GPU fail in
// ncclCommInitRank with "Duplicate GPU detected", which names neither the
// ranks nor what to do. So every rank allgathers its GPU's PCI bus id (the
// one identity that holds across processes with different
// CUDA_VISIBLE_DEVICES) before any communicator exists, and every rank
// throws the same error, naming the first two ranks that share a GPU.
void checkAGpuPerRank(Bootstrap& boot, int ordinal) {
  struct GpuId {
    char bus[32];
  };
  GpuId mine{};
  HIR_CUDA_CHECK(ordinal, cudaDeviceGetPCIBusId(mine.bus, sizeof(mine.bus) - 1, ordinal));
  const std::size_t world = static_cast<std::size_t>(boot.world());
  std::vector<GpuId> all(world);
  boot.allgather(&mine, all.data(), sizeof(GpuId));
  const std::vector<std::string>& nodes = boot.nodes();
  std::map<std::pair<std::string_view, std::string_view>, std::size_t> first;
  for (std::size_t r = 0; r < world; ++r) {
    const std::string_view bus(all[r].bus, strnlen(all[r].bus, sizeof(all[r].bus)));
    const auto [at, added] = first.insert({{nodes[r], bus}, r});
    HIR_CHECK_AS(BackendError, added,
                 "nccl: ranks {} and {} both run on the GPU at PCI {} of node '{}', and NCCL "
                 "needs a GPU of its own for each rank: give each rank of a node its own GPU "
                 "(at most as many ranks per node as it has GPUs, or "
                 "SessionOptions::device_index){}",
                 at->second, r, bus, nodes[r],
                 boot.rankSpace() == RankSpace::Processes
                     ? ", or run this program's communications on backend 'ipc', which lets "
                       "ranks in processes share a GPU"
                     : "");
  }
}

}  // namespace

void NcclBackend::State::setupTeams(const BackendContext& ctx) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  teams.reserve(ctx.teams.size());  // abortAll() may read it from another thread

  IdMessage message;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&message.id);
    message.ok = r == ncclSuccess;
    if (!message.ok)
      std::snprintf(message.error, sizeof(message.error), "%s; %s", ncclGetErrorString(r),
                    ncclGetLastError(nullptr));
  }
  ctx.bootstrap->broadcast(&message, sizeof(message), 0);
  HIR_CHECK_AS(BackendError, message.ok, "nccl: ncclGetUniqueId failed on rank 0 at setup: {}",
               message.error);

  TeamComm world_comm;
  HIR_NCCL_CHECK(ncclCommInitRankConfig(&world_comm.comm, world, message.id, rank, &config), rank,
                 "setup");
  world_comm.rank = rank;
  world_comm.size = world;
  world_comm.owned = true;
  teams.push_back(world_comm);
  if (logEnabled(LogLevel::Info, Subsys::Nccl)) {
    int version = 0;
    (void)ncclGetVersion(&version);
    HIR_LOG_INFO(Subsys::Nccl, "communicator of team 0 (the world, {} ranks) created on GPU {}; "
                 "NCCL {}.{}.{}",
                 world, ordinal, version / 10000, version % 10000 / 100, version % 100);
  }
  connectPeers();

  // Every rank takes part in every split, members or not, in team order.
  for (std::size_t t = 1; t < ctx.teams.size(); ++t) {
    const std::vector<int>& members = ctx.teams[t];
    auto same = std::find(ctx.teams.begin(), ctx.teams.begin() + t, members);
    if (same != ctx.teams.begin() + t) {
      TeamComm shared = teams[same - ctx.teams.begin()];
      shared.owned = false;
      teams.push_back(shared);
      continue;
    }
    auto it = std::find(members.begin(), members.end(), rank);
    const bool member = it != members.end();
    const int index = member ? static_cast<int>(it - members.begin()) : 0;
    TeamComm team;
    HIR_NCCL_CHECK(ncclCommSplit(teams[0].comm, member ? 0 : NCCL_SPLIT_NOCOLOR, index,
                                 &team.comm, &config),
                   rank, fmt::format("setup (team {})", t));
    team.owned = team.comm != nullptr;
    team.size = static_cast<int>(members.size());
    team.rank = member ? index : -1;
    if (member) {
      HIR_CHECK_AS(BackendError, team.comm != nullptr,
                   "nccl: ncclCommSplit gave rank {} no communicator for team {}", rank, t);
      int comm_rank = -1;
      HIR_NCCL_CHECK(ncclCommUserRank(team.comm, &comm_rank), rank, "setup");
      HIR_INTERNAL_ASSERT(comm_rank == index,
                          "nccl: team {} communicator rank {} differs from team rank {}", t,
                          comm_rank, index);
      HIR_LOG_INFO(Subsys::Nccl, "communicator of team {} ({} ranks, this rank is {}) split from "
                   "the world's",
                   t, team.size, index);
    } else {
      team.comm = nullptr;
    }
    teams.push_back(team);
  }
}

// NCCL connects a pair's point-to-point channels on first use, with a host
// handshake between the two ranks inside the send or recv call. Two ranks
// that each post a send to the other before the matching recv (a ring of
// ungrouped sends) would then block each other's host for ever in post().
// A grouped one-byte exchange with every peer at setup makes those
// connections now (all of a peer's channels at once), so that later posts
// never wait on a peer's host. Collectives need no such step: every rank
// reaches them in the same order.
void NcclBackend::State::connectPeers() {
  if (world < 2) return;
  const ncclComm_t comm = teams[0].comm;
  // Kept in `retired` (freed at teardown): cudaFree would wait for the
  // exchange even when it never completes.
  void* bytes = nullptr;
  HIR_CUDA_CHECK(ordinal, cudaMalloc(&bytes, static_cast<std::size_t>(world) + 1));
  retired.push_back(bytes);
  HIR_CUDA_CHECK(ordinal, cudaMemsetAsync(bytes, 0, static_cast<std::size_t>(world) + 1, stream));
  Group group(rank, "setup (connecting peers)");
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    HIR_NCCL_CHECK(ncclSend(bytes, 1, ncclUint8, peer, comm, stream), rank, "setup");
    HIR_NCCL_CHECK(ncclRecv(bytesAt(bytes, 1 + static_cast<std::size_t>(peer)), 1, ncclUint8,
                            peer, comm, stream),
                   rank, "setup");
  }
  group.end();
  HIR_CHECK_AS(TimeoutError, drainStream(timeout),
               "nccl: connecting rank {} to its peers did not complete within {} ms", rank,
               timeout.count());
}

// From any thread (the evaluator's watchdog, while the posting thread is
// stuck in an NCCL call): ncclCommAbort makes NCCL's kernels and calls on
// the communicator return.
void NcclBackend::State::abortAll() {
  if (aborted.exchange(true)) return;
  HIR_LOG_INFO(Subsys::Nccl, "aborting the communicators of {} teams", teams.size());
  for (TeamComm& t : teams) {
    if (!t.owned || t.comm == nullptr) continue;
    ncclResult_t r = ncclCommAbort(t.comm);
    if (r != ncclSuccess)
      HIR_LOG_WARN(Subsys::Nccl, "ncclCommAbort failed: {}", ncclGetErrorString(r));
  }
}

void NcclBackend::State::checkAsyncErrors() const {
  for (std::size_t t = 0; t < teams.size(); ++t) {
    if (!teams[t].owned || teams[t].comm == nullptr) continue;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(teams[t].comm, &async) != ncclSuccess) continue;
    if (async == ncclSuccess || async == ncclInProgress) continue;
    const char* last = ncclGetLastError(teams[t].comm);
    throw BackendError(fmt::format("nccl: the communicator of team {} reported an asynchronous "
                                   "error on rank {}: {}{}{}",
                                   t, rank, ncclGetErrorString(async), last && *last ? "; " : "",
                                   last ? last : ""));
  }
}

// Teardown without exceptions: drain the stream, destroy (or, when the
// stream does not drain, abort) the communicators, free the scratch.
void NcclBackend::State::release() {
  if (ordinal < 0) return;  // setup never reached the device
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != ordinal) (void)cudaSetDevice(ordinal);
  bool drained = false;
  if (stream && !aborted.load()) {
    std::string why;
    try {
      // The latest operations ran on a caller's stream (postJoined), which
      // outlives the backend (see backend.h): wait for them there. One
      // deadline for both waits.
      const auto start = std::chrono::steady_clock::now();
      if (lane_on != nullptr && !cuda::pollEvent(laneEnd(), timeout, ordinal))
        throw TimeoutError(fmt::format("operations on the caller's stream still pending after {} ms",
                                       timeout.count()));
      drained = drainStream(remainingOf(timeout, start));
      if (!drained)
        why = fmt::format("communications still pending after {} ms", timeout.count());
    } catch (const std::exception& e) {
      why = e.what();  // e.g. a sticky CUDA error: nothing will complete
    }
    if (!drained) {
      HIR_LOG_WARN(Subsys::Nccl, "teardown: {}; aborting the communicators", why);
      abortAll();
    }
  }
#if HIR_NCCL_HAS_WINDOWS
  // Windows before their communicators (deregistering is collective, in the
  // same order on every rank: the reverse of registration).
  if (!aborted.load())
    for (auto it = windows.rbegin(); it != windows.rend(); ++it) {
      ncclResult_t r = ncclCommWindowDeregister(it->comm, it->window);
      if (r != ncclSuccess)
        HIR_LOG_WARN(Subsys::Nccl, "ncclCommWindowDeregister failed: {}", ncclGetErrorString(r));
    }
  windows.clear();
#endif
  if (!aborted.load()) {
    // Split communicators before the world, in the same order on every rank
    // (ncclCommDestroy is an intra-node collective).
    for (auto it = teams.rbegin(); it != teams.rend(); ++it) {
      if (!it->owned || it->comm == nullptr) continue;
      ncclResult_t r = ncclCommDestroy(it->comm);
      if (r != ncclSuccess)
        HIR_LOG_WARN(Subsys::Nccl, "ncclCommDestroy failed: {}", ncclGetErrorString(r));
    }
  }
  teams.clear();
  if (drained || !stream) {
    if (scratch) (void)cudaFree(scratch);
    for (void* p : retired) (void)cudaFree(p);
#if HIR_NCCL_HAS_WINDOWS
    for (void* p : symmetric_memory) (void)ncclMemFree(p);
#endif
  }
#if HIR_NCCL_HAS_WINDOWS
  symmetric_memory.clear();  // left to the process when work may still use it
#endif
  scratch = nullptr;
  retired.clear();
  if (inputs_ready) (void)cudaEventDestroy(inputs_ready);
  if (stream_tail) (void)cudaEventDestroy(stream_tail);
  stream_tail = nullptr;
  if (lane_mark) (void)cudaEventDestroy(lane_mark);
  lane_mark = nullptr;
  if (stream) (void)cudaStreamDestroy(stream);
  inputs_ready = nullptr;
  stream = nullptr;
  (void)cudaGetLastError();
}

// ------------------------------------------------------------------- backend

NcclBackend::NcclBackend() : state_(std::make_unique<State>()) {}

NcclBackend::~NcclBackend() { state_->release(); }

void NcclBackend::setup(const BackendContext& ctx) {
  State& s = *state_;
  HIR_INTERNAL_ASSERT(!s.ready && s.ordinal < 0, "nccl backend set up twice");
  HIR_INTERNAL_ASSERT(ctx.device != nullptr && ctx.bootstrap != nullptr,
                      "nccl setup without a device or a bootstrap");
  HIR_CHECK_AS(BackendError, ctx.device->kind() == "cuda",
               "nccl: the nccl backend runs on the cuda device, not on '{}'", ctx.device->kind());
  s.rank = ctx.bootstrap->rank();
  s.world = ctx.bootstrap->world();
  s.timeout = ctx.timeout;
  checkTeams(ctx, s.world);

  // hostir never uses NVLink multicast; respect an explicit user setting.
  if (std::getenv("NCCL_NVLS_ENABLE") == nullptr) setenv("NCCL_NVLS_ENABLE", "0", 0);

  const int ordinal = cuda::deviceOrdinal(*ctx.device);
  cuda::activate(ordinal);
  s.ordinal = ordinal;
  checkAGpuPerRank(*ctx.bootstrap, ordinal);
  HIR_CUDA_CHECK(ordinal, cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  HIR_CUDA_CHECK(ordinal, cudaEventCreateWithFlags(&s.inputs_ready, cudaEventDisableTiming));
  HIR_CUDA_CHECK(ordinal, cudaEventCreateWithFlags(&s.stream_tail, cudaEventDisableTiming));
  HIR_CUDA_CHECK(ordinal, cudaEventCreateWithFlags(&s.lane_mark, cudaEventDisableTiming));
  const char* always_join = std::getenv("HIR_NCCL_ALWAYS_JOIN");
  s.always_join = always_join != nullptr && std::strcmp(always_join, "0") != 0;
  s.setupTeams(ctx);
  device_ = ctx.device;
  s.ready = true;
}

void NcclBackend::post(std::span<const PostArgs> ops, Stream& current, Event& done) {
  State& s = *state_;
  cuda::CudaStream& caller = s.openPost(ops, current);
  const std::string_view path = postPath(ops);
  cudaEvent_t done_event = cuda::nativeEvent(done, "nccl post");

  // The inputs are ready once the caller's stream reaches this point: the
  // backend stream waits on an event recorded there. Skipped when nothing
  // reached that (tracked) stream since the backend stream last joined it,
  // other than stream waits on this backend's own completions (see wait()):
  // the backend stream is already ordered after all of it.
  const bool joined = !s.always_join && caller.tracked() &&
                      caller.counterId() == s.joined_stream && caller.work() == s.joined_work;
  if (!joined) {
    HIR_CUDA_CHECK(s.ordinal, cudaEventRecord(s.inputs_ready, caller.native()));
    HIR_CUDA_CHECK(s.ordinal, cudaStreamWaitEvent(s.stream, s.inputs_ready, 0));
    s.joined_stream = caller.counterId();
    s.joined_work = caller.work();
  }

  // After the latest operations, when they ran on another caller's stream
  // (on this one, the record above covers them: postJoined counted them as
  // work of that stream).
  if (s.lane_on != nullptr && s.lane_on != caller.native())
    HIR_CUDA_CHECK(s.ordinal, cudaStreamWaitEvent(s.stream, s.laneEnd(), 0));
  s.lane_on = nullptr;
  ++s.stream_posts;
  s.target = s.stream;
  s.enqueueAll(ops, path);
  HIR_CUDA_CHECK(s.ordinal, cudaEventRecord(done_event, s.stream));
}

// The ops go straight onto the caller's stream, which is where they would
// have to be waited for anyway: no record + wait to the backend stream and
// back, and no completion event. Only the order of this backend's
// operations needs care.
bool NcclBackend::postJoined(std::span<const PostArgs> ops, Stream& current, Event&) {
  State& s = *state_;
  cuda::CudaStream& caller = s.openPost(ops, current);
  const std::string_view path = postPath(ops);
  cudaStream_t on = caller.native();
  if (s.lane_on == nullptr) {
    // After the backend stream's operations, unless this stream already
    // waited for all of them.
    if (s.stream_posts != 0 && !(s.tail_seen_by == on && s.tail_seen_posts == s.stream_posts)) {
      HIR_CUDA_CHECK(s.ordinal, cudaEventRecord(s.stream_tail, s.stream));
      HIR_CUDA_CHECK(s.ordinal, cudaStreamWaitEvent(on, s.stream_tail, 0));
      s.tail_seen_by = on;
      s.tail_seen_posts = s.stream_posts;
    }
  } else if (s.lane_on != on) {
    HIR_CUDA_CHECK(s.ordinal, cudaStreamWaitEvent(on, s.laneEnd(), 0));
  }
  s.target = on;
  s.enqueueAll(ops, path);
  caller.noteWork();  // a later post() from this stream must record after these ops
  s.lane_on = on;
  s.lane_marked = s.several_streams;
  if (s.lane_marked) HIR_CUDA_CHECK(s.ordinal, cudaEventRecord(s.lane_mark, on));
  return true;
}

// A stream-mode wait on one of this backend's completions adds nothing the
// backend stream is not already ordered after: if the caller stream was
// joined before it, it still is after it.
void NcclBackend::wait(Event& done, Stream& current, WaitMode mode, Duration timeout) {
  State& s = *state_;
  if (mode != WaitMode::Stream) return hostWait(done, timeout);
  // Device::wait without its checks: this is the hot path of stream waits.
  cuda::CudaStream& cs = cuda::cudaStream(current, "nccl wait");
  const bool was_joined = cs.tracked() && cs.counterId() == s.joined_stream &&
                          cs.work() == s.joined_work;
  cuda::activate(s.ordinal);
  HIR_CUDA_CHECK(s.ordinal,
                 cudaStreamWaitEvent(cs.native(), cuda::nativeEvent(done, "nccl wait"), 0));
  cs.noteWork();  // a new dependency of `current`, as Device::wait counts it
  if (was_joined) s.joined_work = cs.work();
}

// A host wait that an asynchronous error of a communicator ends at once,
// instead of after the timeout.
void NcclBackend::hostWait(Event& done, Duration timeout) {
  State& s = *state_;
  HIR_INTERNAL_ASSERT(device_ != nullptr, "nccl backend waited on before setup()");
  cuda::activate(s.ordinal);
  const cudaEvent_t e = cuda::nativeEvent(done, "nccl wait");
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const Duration left = remainingOf(timeout, start);
    if (cuda::pollEvent(e, std::min(left, kAsyncErrorPoll), s.ordinal)) break;
    s.checkAsyncErrors();
    HIR_CHECK_AS(TimeoutError, left > Duration{0},
                 "nccl: a host wait on rank {} did not complete within {} ms{}", s.rank,
                 timeout.count(), s.aborted.load() ? " (the communicators were aborted)" : "");
  }
  (void)device_->query(done);  // the device's sticky error, if any
}

void NcclBackend::abort() { state_->abortAll(); }

// ncclMemAlloc'd memory, zeroed (as Device::allocate's), registered as a
// symmetric window with every team communicator of `teams` this rank is a
// member of. Declined (null, on every rank alike) when the NCCL library in
// use predates windows (2.27).
void* NcclBackend::allocateSymmetric(std::size_t bytes, std::span<const int> teams) {
#if HIR_NCCL_HAS_WINDOWS
  State& s = *state_;
  HIR_INTERNAL_ASSERT(s.ready, "nccl: allocateSymmetric before setup");
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version < NCCL_VERSION(2, 27, 0)) return nullptr;
  cuda::activate(s.ordinal);
  void* p = nullptr;
  HIR_NCCL_CHECK(ncclMemAlloc(&p, bytes), s.rank, "symmetric memory");
  s.symmetric_memory.push_back(p);
  // Zeroed, and done before this returns. cudaMemset would not do: on
  // device memory it returns before the memset ran, on the legacy default
  // stream, with which the evaluator's non-blocking streams do not
  // synchronize, so a program's first fill could run first and be zeroed
  // after it (GraphMode.AGraphOfSendsAndRecvsTearsDownPromptly once saw its
  // alltoall's input all zeros).
  HIR_CUDA_CHECK(s.ordinal, cudaMemsetAsync(p, 0, bytes, s.stream));
  HIR_CHECK_AS(TimeoutError, s.drainStream(s.timeout),
               "nccl: zeroing {} bytes of symmetric memory on rank {} did not complete within {} ms",
               bytes, s.rank, s.timeout.count());
  for (int team : teams) {
    HIR_INTERNAL_ASSERT(team >= 0 && team < static_cast<int>(s.teams.size()),
                        "nccl: allocateSymmetric for team {} of {}", team, s.teams.size());
    const TeamComm& t = s.teams[team];
    if (t.comm == nullptr) continue;  // not a member
    // One window per communicator: teams that reuse one share it.
    bool registered = false;
    for (int earlier : teams) {
      if (earlier == team) break;
      registered |= s.teams[earlier].comm == t.comm;
    }
    if (registered) continue;
    ncclWindow_t window = nullptr;
    HIR_NCCL_CHECK(ncclCommWindowRegister(t.comm, p, bytes, &window, NCCL_WIN_COLL_SYMMETRIC),
                   s.rank, "symmetric memory");
    s.windows.push_back({t.comm, window});
  }
  HIR_LOG_DEBUG(Subsys::Nccl, "{} bytes of symmetric memory registered with {} team(s)", bytes,
                teams.size());
  return p;
#else
  (void)bytes;
  (void)teams;
  return nullptr;
#endif
}

// What the posts remember about streams and events (the joins to skip, the
// latest lane, the tail seen) refers to work before the capture, or to
// events recorded inside it: forgotten at both ends, so that the first
// post of the capture joins its stream to the capture and nothing after it
// waits on a captured event. Everything before either call has completed
// or is in the graph, so nothing is lost.
void NcclBackend::setCapturing(bool) {
  State& s = *state_;
  s.lane_on = nullptr;
  s.lane_marked = false;
  s.several_streams = false;
  s.stream_posts = 0;
  s.tail_seen_by = nullptr;
  s.tail_seen_posts = 0;
  s.joined_stream = nullptr;
  s.joined_work = 0;
}

// Every communication type, dtype and reduce op of hostir maps to NCCL
// (gather, scatter and alltoall through grouped send/recv), and peers on
// other nodes are fine.
BackendCaps NcclBackend::caps() {
  BackendCaps c;
  c.name = "nccl";
  c.devices = {"cuda"};
  c.types = EnumSet<CommType>::all(kCommTypeNames);
  c.dtypes = EnumSet<DType>::all(kDTypeNames);
  c.reduce_ops = EnumSet<ReduceOp>::all(kReduceOpNames);
  c.auto_priority = kAutoPriority;
  c.post_order = PostOrder::kPerRank;  // one backend stream per rank
  c.capturable = true;  // NCCL operations are capturable; setCapturing() resets the joins
  c.symmetric_memory = HIR_NCCL_HAS_WINDOWS != 0;  // and the library too, at allocateSymmetric
  return c;
}

void registerNcclBackend() {
  registerBackend({NcclBackend::caps(), [] { return std::make_unique<NcclBackend>(); }});
}

}  // namespace hir
