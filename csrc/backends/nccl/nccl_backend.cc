// The NCCL backend (nccl_backend.h): the Backend calls, and the order of the
// posts' operations across the backend stream and the callers' streams
// (joins skipped when nothing new reached a stream, joined posts on the
// caller's stream, the lane of the latest operations). The operations
// themselves are in nccl_enqueue.cc, the communicators in nccl_comms.cc.
#include "backends/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <string_view>

#include "backends/nccl/nccl_state.h"
#include "backends/post_checks.h"

namespace hir {

namespace {

constexpr int kNcclAutoPriority = 10;
// A host wait polls its event in slices of this length and asks the
// communicators for asynchronous errors (a peer gone, a network failure)
// between them, so that such an error ends the wait at once.
constexpr Duration kAsyncErrorPoll{20};

}  // namespace

cuda::CudaStream& NcclBackend::State::openPost(std::span<const PostArgs> ops, Stream& current) {
  checkPostable("nccl", ops, ready, aborted.load(), rank, "the communicators were aborted");
  cuda::activate(ordinal);
  return cuda::cudaStream(current, "nccl post");
}

// Without a mark (the first switch of streams), it is recorded on lane_on
// now: the new post then also follows what the caller enqueued there since,
// all of it issued before this post and so unable to wait for it. From then
// on posts are marked.
cudaEvent_t NcclBackend::State::laneEnd() {
  several_streams = true;
  if (!lane_marked) {
    HIR_CUDA_CHECK(ordinal, cudaEventRecord(lane_mark, lane_on));
    lane_marked = true;
  }
  return lane_mark;
}

NcclBackend::NcclBackend() : state_(std::make_unique<State>()) {}

NcclBackend::~NcclBackend() { state_->release(); }

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
  c.auto_priority = kNcclAutoPriority;
  c.post_order = PostOrder::kPerRank;  // one backend stream per rank
  c.capturable = true;  // NCCL operations are capturable; setCapturing() resets the joins
  c.symmetric_memory = HIR_NCCL_HAS_WINDOWS != 0;  // and the library too, at allocateSymmetric
  return c;
}

void registerNcclBackend() {
  registerBackend({NcclBackend::caps(), [] { return std::make_unique<NcclBackend>(); }});
}

}  // namespace hir
