// What the parts of the NCCL backend share (private to backends/nccl/): the
// backend's State, one team's communicator, an NCCL group as a scope, and
// the check of NCCL's results. The parts:
// - nccl_backend.cc: the Backend calls, and the order of the posts'
//   operations across the backend stream and the callers' streams;
// - nccl_enqueue.cc: every communication type as NCCL calls, and the
//   scratch copies of inputs that overlap their outputs;
// - nccl_comms.cc: the communicators (setup, connections, asynchronous
//   errors, abort, teardown) and the symmetric memory registered with them.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "backends/nccl/nccl_backend.h"
#include "common/check.h"
#include "device/cuda_interop.h"

// NCCL's symmetric windows (ncclMemAlloc + ncclCommWindowRegister with
// NCCL_WIN_COLL_SYMMETRIC) came with NCCL 2.27.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define HIR_NCCL_HAS_WINDOWS 1
#else
#define HIR_NCCL_HAS_WINDOWS 0
#endif

namespace hir {

// BackendError "nccl: CALL failed on rank RANK at PATH: NCCL's message".
[[noreturn]] void throwNcclError(ncclResult_t r, const char* call, int rank,
                                 std::string_view path);

inline void ncclCheck(ncclResult_t r, const char* call, int rank, std::string_view path) {
  if (r != ncclSuccess) throwNcclError(r, call, rank, path);
}

#define HIR_NCCL_CHECK(call, rank, path) ::hir::ncclCheck((call), #call, (rank), (path))

namespace nccl {

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

}  // namespace nccl

struct NcclBackend::State {
  bool ready = false;  // setup() done
  int rank = -1;
  int world = 0;
  int ordinal = -1;
  Duration timeout{300000};
  std::vector<nccl::TeamComm> teams;
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

  // Scratch for inputs that overlap outputs. Outgrown buffers may still be
  // read by enqueued work: they are kept until destruction.
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

  // nccl_backend.cc
  // What post() and postJoined() do first: the checks, the device, and the
  // caller's stream.
  cuda::CudaStream& openPost(std::span<const PostArgs> ops, Stream& current);
  // An event that a post on another stream than lane_on waits on to follow
  // the latest joined post's operations.
  cudaEvent_t laneEnd();

  // nccl_enqueue.cc
  // ops as one unit (a group when there are several) on `target`.
  void enqueueAll(std::span<const PostArgs> ops, std::string_view path);
  void enqueue(const PostArgs& op);
  void enqueueGather(const PostArgs& op, const nccl::TeamComm& t, std::string_view path);
  void enqueueScatter(const PostArgs& op, const nccl::TeamComm& t, std::string_view path);
  void enqueueAlltoall(const PostArgs& op, const nccl::TeamComm& t, std::string_view path);
  const nccl::TeamComm& teamOf(const PostArgs& op, std::string_view path) const;
  // The buffer an op should read: `in` itself, or, when it overlaps `out`
  // other than in NCCL's in-place layout, a copy of it in scratch.
  const void* separate(const void* in, std::size_t in_bytes, const void* out,
                       std::size_t out_bytes, bool nccl_in_place, std::string_view path);
  void* scratchFor(std::size_t bytes, std::string_view path);
  void copyOnStream(void* dst, const void* src, std::size_t bytes, std::string_view path);

  // nccl_comms.cc
  void setupTeams(const BackendContext& ctx);
  void connectPeers();
  // Waits for the work enqueued so far on the backend stream: false on
  // timeout; BackendError when CUDA reports an error.
  bool drainStream(Duration limit);
  void abortAll();
  // BackendError when a communicator reports an asynchronous error.
  void checkAsyncErrors() const;
  void release();
};

}  // namespace hir
