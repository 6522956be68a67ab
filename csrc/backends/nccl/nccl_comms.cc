// The NCCL backend's communicators (nccl_state.h): one per team, split from
// the world's at setup; the connections of every pair of ranks; the
// asynchronous errors they report; their abort and their teardown; and the
// symmetric memory registered with them.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hostir/bootstrap.h>

#include "common/buffer_ranges.h"
#include "backends/nccl/nccl_state.h"
#include "common/log.h"

namespace hir {

namespace {

std::string_view functionName(const char* call) {
  std::string_view text(call);
  std::size_t paren = text.find('(');
  return paren == std::string_view::npos ? text : text.substr(0, paren);
}

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

[[noreturn]] void throwNcclError(ncclResult_t r, const char* call, int rank,
                                 std::string_view path) {
  const char* last = ncclGetLastError(nullptr);
  throw BackendError(fmt::format("nccl: {} failed on rank {} at {}: {}{}{}", functionName(call),
                                 rank, path.empty() ? "setup" : path, ncclGetErrorString(r),
                                 last && *last ? "; " : "", last ? last : ""));
}

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
  s.always_join = ctx.settings.on(Setting::NcclAlwaysJoin);
  s.setupTeams(ctx);
  device_ = ctx.device;
  s.ready = true;
}

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

  nccl::TeamComm world_comm;
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
      nccl::TeamComm shared = teams[same - ctx.teams.begin()];
      shared.owned = false;
      teams.push_back(shared);
      continue;
    }
    auto it = std::find(members.begin(), members.end(), rank);
    const bool member = it != members.end();
    const int index = member ? static_cast<int>(it - members.begin()) : 0;
    nccl::TeamComm team;
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
  nccl::Group group(rank, "setup (connecting peers)");
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    HIR_NCCL_CHECK(ncclSend(bytes, 1, ncclUint8, peer, comm, stream), rank, "setup");
    HIR_NCCL_CHECK(ncclRecv(bytesAt(bytes, 1 + static_cast<std::size_t>(peer)), 1, ncclUint8, peer,
                            comm, stream),
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
  for (nccl::TeamComm& t : teams) {
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

bool NcclBackend::State::drainStream(Duration limit) {
  cudaEvent_t e = nullptr;
  HIR_CUDA_CHECK(ordinal, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  struct Destroy {
    cudaEvent_t e;
    ~Destroy() { (void)cudaEventDestroy(e); }
  } destroy{e};
  HIR_CUDA_CHECK(ordinal, cudaEventRecord(e, stream));
  return cuda::pollEvent(e, limit, ordinal);
}

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
  // after it.
  HIR_CUDA_CHECK(s.ordinal, cudaMemsetAsync(p, 0, bytes, s.stream));
  HIR_CHECK_AS(TimeoutError, s.drainStream(s.timeout),
               "nccl: zeroing {} bytes of symmetric memory on rank {} did not complete within {} ms",
               bytes, s.rank, s.timeout.count());
  for (int team : teams) {
    HIR_INTERNAL_ASSERT(team >= 0 && team < static_cast<int>(s.teams.size()),
                        "nccl: allocateSymmetric for team {} of {}", team, s.teams.size());
    const nccl::TeamComm& t = s.teams[team];
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

}  // namespace hir
