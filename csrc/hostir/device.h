// The device interface: memory, streams, events and the three data kernels
// (fill, copy, check), with CUDA's asynchronous semantics.
//
// Semantics every implementation keeps (the host device included):
// - Work enqueued on one stream runs in order; the enqueuing call returns
//   without waiting for it.
// - record(e, s) captures the work enqueued on s so far; e completes when that
//   work has run. A later record() on the same event replaces the capture for
//   later waits only.
// - wait(s, e) makes work enqueued on s after this call wait for the capture
//   e holds at the time of the call (an event never recorded is complete).
// - synchronize() blocks the host, always with a timeout (TimeoutError).
// - A failure inside enqueued work is sticky: the next query/synchronize
//   throws BackendError with its message.
//
// Optional parts, each with a supports() query: IPC (exporting memory to and
// mapping memory from another process of the same node), stream-ordered
// 32-bit semaphores (write a value; wait until a value is >= a target,
// cyclically), the same with values counted on the device (so that a
// graph's replays go on counting), and elementwise reductions across buffers.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/types.h>

namespace hir {

class Settings;  // <hostir/settings.h>

using Duration = std::chrono::milliseconds;

// What is left of `total` since `start` (never negative): several waits
// that share one deadline pass this, so that together they take at most
// `total`.
inline Duration remainingOf(Duration total, std::chrono::steady_clock::time_point start) {
  const auto spent = std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start);
  return spent >= total ? Duration{0} : total - spent;
}

class Stream {
 public:
  virtual ~Stream() = default;
};

class Event {
 public:
  virtual ~Event() = default;
};

// A captured graph of device work (Device::endCapture), replayed by
// Device::launchGraph.
class Graph {
 public:
  virtual ~Graph() = default;
};

// Where a check writes what it found. Lives in host-visible memory
// (Device::allocateCheckRecords) and is read by the host after the work ran.
struct CheckRecord {
  static constexpr int kMaxReported = 4;
  uint64_t mismatches = 0;  // over every execution that wrote here
  uint64_t checked = 0;     // elements checked
  int64_t first_execution = -1;  // execution id of the first failing execution
  int32_t reported = 0;          // entries in index/got/expected (of that execution)
  int32_t pad = 0;
  int64_t index[kMaxReported] = {};
  double got[kMaxReported] = {};
  double expected[kMaxReported] = {};
};

// Optional capabilities.
enum class DeviceFeature : uint8_t {
  Ipc,              // exportMemory / importMemory
  StreamSemaphore,  // writeValue / waitValue
  Compute,          // matmul / add
  Timing,           // createTimingEvent / elapsedMs
  Graphs,           // beginCapture / endCapture / launchGraph
  CountedSemaphore,  // countedStep
  Reduce,            // reduce
  InlineFlags,       // MessageStep parts with inline_flags, up to inlineFlagsMax() bytes
};

// The most sources one Device::reduce combines.
inline constexpr std::size_t kMaxReduceSources = 16;

// Inline flags (ipc's small eager messages; NCCL's LL protocol): a message
// of `bytes` travels as inlineLineBytes(bytes) bytes of 8-byte lines, line w
// holding the message's 4-byte word w (the last one zero-padded) in its low
// half and the flag inlineFlag(v) in its high half, stored as one 8-byte
// store. A receiver that sees a line's flag sees that line's data: no fence
// between the data and a signal, no signal word, no wait on one. The flag
// is never 0 (what the memory held before the first message) and differs
// from the flag of the slot's previous message (v - slots, slots <= 2^30).
// So the memory a receiver polls must hold nothing but lines: bytes of
// another kind (a larger message's data) could hold any flag (ipc keeps a
// line area per slot, apart from the slot).
inline constexpr std::size_t inlineLineBytes(std::size_t bytes) { return (bytes + 3) / 4 * 8; }
inline constexpr uint32_t inlineFlag(uint32_t v) { return v != 0 ? v : 0x80000000u; }
// What a pull stores into its mark before it posts (MessageStep's direct
// delivery): anything but v.
inline constexpr uint32_t directMarkReset(uint32_t v) { return v ^ 0x80000000u; }

// Messages of a semaphore protocol (ipc's eager messages, and the sources
// of its one-shot reductions) done as one device step: Device::reduce does
// them around its reduction, Device::messageStep without one. Every part
// has a number v = (counter != nullptr ? *counter : 0) + number, read when
// the step runs (a counter: in this device's memory, as CountedStep's), and
// `slotted` parts lie in a ring of `slots` (a power of two) of `stride`
// bytes, at slot v % slots. Waits compare cyclically, as waitValue does,
// and end early when *release != 0 (release may be null; the step then
// goes on with whatever is there: the run failed). A push's store of v is a
// release at system scope, after its copy is visible to the peer; a pull's
// or a source's store of v says only that it was read, after every read of
// it (nothing the step wrote is published by it). Stores are made in the
// order of the parts (parts of one lane store into the same word, which
// must end at the last number), and a step's pushes never share a counter
// with its pulls or sources (they are the two directions of a lane). In
// order:
// 1. pushes (copies to peers: ipc's eager sends, and a post's puts and
//    gets): push k waits until *wait >= v - wait_back (its slot is free),
//    copies `bytes` from src to dst (moved to its slot when slotted); then
//    every push stores v into *signal and advances *counter by `advance`.
//    Every push signals before the step waits for anything else, so a peer
//    never waits for this step to start. A step's pushes are independent
//    (none reads or writes what another writes, and each waits only for a
//    peer's signal): a device may run them one after the other or at once
//    (cuda: one grid), as long as their stores of v are in push order.
// 2. pulls (copies from peers: ipc's eager receives, messageStep only):
//    pull k waits until *wait >= v, copies `bytes` from src (moved to its
//    slot when slotted) to dst, stores v into *signal, advances *counter.
// 3. the reduction's sources (reduce only): source j with waits[j],
//    signals[j] or counters[j] has number v_j; wait until
//    *waits[j] >= v_j; source j is srcs[j], or its slot when slotted[j];
//    the reduction; store v_j into *signals[j]; *counters[j] +=
//    advances[j].
// With a step, a reduce of no elements still does every part but the
// reduction. stride keeps the alignment of the buffers.
// Inline parts (supports(DeviceFeature::InlineFlags); `inline_flags`, of
// 1 to inlineFlagsMax() bytes, their end in the ring 8-byte aligned): a
// push writes the lines of its bytes (inlineLineBytes) into its slot, after
// its wait as any push; a pull or a source has no wait word: it waits until
// every line of its slot holds inlineFlag(v) (or *release != 0), then reads
// the data out of the lines. Their signals and counters are as above, but
// a push's signal need not be ordered after its lines (they carry their
// own flags; the signal only tells the lane's latest number).
// Direct delivery (optional for a device: it may ignore these fields, and
// then moves every message through its slot): a pull with `posted` may,
// when it starts, store directMarkReset(v) into its mark (*mark, or slot
// v % slots of the ring of words at `mark` when slotted), then release v
// into *posted (its dst is then free for the peer to write), and must then,
// after its wait, read the mark: v means the data is already in dst (no
// copy). Only the push can have stored v there, after it saw *posted. A
// push with `direct` (the receiver's buffer, mapped) may, when *posted >= v
// (cyclic) before or while it waits, copy to `direct` instead of its slot
// and store v into its mark before its signal (which then publishes both).
// Marks and `posted` belong to parts not in lines, and the caller gives
// `posted` to a pull only when it is its step's one pull of its lane (with
// two, the later number's direct mark could overwrite the earlier's in a
// ring of one slot).
struct MessageStep {
  std::array<uint32_t*, kMaxReduceSources> counters{};
  std::array<uint32_t, kMaxReduceSources> numbers{};
  std::array<uint32_t, kMaxReduceSources> advances{};
  std::array<const uint32_t*, kMaxReduceSources> waits{};
  std::array<uint32_t*, kMaxReduceSources> signals{};
  std::array<bool, kMaxReduceSources> slotted{};
  std::array<bool, kMaxReduceSources> inline_flags{};  // sources in lines
  const uint32_t* release = nullptr;
  uint32_t slots = 0;
  std::size_t stride = 0;
  // A push or a pull.
  struct Copy {
    uint32_t* counter = nullptr;
    uint32_t number = 0, advance = 0, wait_back = 0;
    const uint32_t* wait = nullptr;
    void* dst = nullptr;
    const void* src = nullptr;
    std::size_t bytes = 0;
    uint32_t* signal = nullptr;
    bool slotted = false;
    bool inline_flags = false;  // the slot holds lines (push: writes them; pull: reads them)
    void* direct = nullptr;      // push: the receiver's buffer (direct delivery)
    uint32_t* posted = nullptr;  // push: read; pull: written (direct delivery)
    uint32_t* mark = nullptr;    // push: written; pull: read and reset (direct delivery)
  };
  using Push = Copy;
  std::array<Copy, kMaxReduceSources> pushes{};
  std::size_t push_count = 0;
  std::array<Copy, kMaxReduceSources> pulls{};
  std::size_t pull_count = 0;
};

// Whether part `c` of a MessageStep (a push when `push`) asks for direct
// delivery: not in lines, with a mark and a "posted" word, and for a push
// the receiver's buffer. A device that does direct delivery decides with
// this, for every part alike.
inline bool asksDirect(const MessageStep::Copy& c, bool push) {
  return !c.inline_flags && c.mark != nullptr && c.posted != nullptr &&
         (!push || c.direct != nullptr);
}

// One step of a semaphore protocol whose value is not the host's but
// v = *counter + offset, with `counter` in this device's memory and read when
// the step runs: captured into a graph, every replay counts on. In order,
// each part optional (null pointer, 0 bytes):
// - wait until (int32_t)(*wait_addr - (v - wait_back)) >= 0 (the cyclic
//   compare of waitValue), or until *release != 0 (release: this device's
//   memory, set when the protocol gives up; the step then goes on without
//   its data);
// - copy dst[0, bytes) = src[0, bytes), where, with slots > 0 (a ring of
//   slots, a power of two: ipc's eager messages), dst and src are first
//   moved by (v % slots) * dst_stride and (v % slots) * src_stride bytes;
// - store v into *signal_addr, after the copy is visible to whoever sees
//   the value (release at system scope);
// - *counter += advance.
// `counter` is touched only by the steps of one lane, which run in order
// (one stream, or streams ordered by events).
struct CountedStep {
  uint32_t* counter = nullptr;
  uint32_t offset = 0;
  uint32_t advance = 0;
  const uint32_t* wait_addr = nullptr;
  const uint32_t* release = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  uint32_t* signal_addr = nullptr;
  uint32_t wait_back = 0;
  uint32_t slots = 0;
  std::size_t dst_stride = 0, src_stride = 0;
};

// Part `c` (a push when `push`, else a pull) of `m`, numbered from its
// counter, as a CountedStep of its own: what a device without a fused
// message step enqueues for it.
inline CountedStep countedStepOf(const MessageStep& m, const MessageStep::Copy& c, bool push) {
  return CountedStep{.counter = c.counter,
                     .offset = c.number,
                     .advance = c.advance,
                     .wait_addr = c.wait,
                     .release = m.release,
                     .dst = c.dst,
                     .src = c.src,
                     .bytes = c.bytes,
                     .signal_addr = c.signal,
                     .wait_back = c.wait_back,
                     .slots = c.slotted ? m.slots : 0,
                     .dst_stride = c.slotted && push ? m.stride : 0,
                     .src_stride = c.slotted && !push ? m.stride : 0};
}

// out[m, n] (+)= op(a)[m, k] * op(b)[k, n], row-major, where op(x) is x or
// its transpose. a is stored as (transpose_a ? k x m : m x k) with rows of
// lda elements, b as (transpose_b ? n x k : k x n) with rows of ldb
// elements, out as m x n with rows of ldo elements. a, b and out have one
// dtype: float32, float16 or bfloat16; products are summed in float32. out
// must not overlap a or b (the plan-stepping core refuses such a matmul).
// accumulate: out += a * b, else out = a * b (cuBLAS may round a * b to a
// half type before adding out: one more rounding than the host device).
struct MatmulArgs {
  DType dtype = DType::Float32;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  int64_t lda = 0, ldb = 0, ldo = 0;
  bool transpose_a = false, transpose_b = false, accumulate = false;
};

// An exported allocation: opaque bytes a peer process on the same node passes
// to importMemory.
struct MemoryHandle {
  std::vector<uint8_t> bytes;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string_view kind() const = 0;  // "host" or "cuda"
  virtual std::string describe() const = 0;   // e.g. "cuda:1 (NVIDIA H200)"
  virtual bool supports(DeviceFeature f) const = 0;

  // Memory. allocate() returns zeroed memory usable by the data kernels and
  // communication backends; zero bytes gives a valid unique pointer.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  // Host-visible records for check(), zeroed.
  virtual CheckRecord* allocateCheckRecords(std::size_t n) = 0;
  virtual void freeCheckRecords(CheckRecord* p) = 0;

  // Streams. defaultStream() is the device's stream 0; wrapStream() adopts a
  // caller's native stream (cudaStream_t for cuda; nullptr: default stream)
  // without owning it.
  virtual Stream& defaultStream() = 0;
  virtual std::unique_ptr<Stream> createStream() = 0;
  virtual std::unique_ptr<Stream> wrapStream(void* native) = 0;

  // Events (created once, pooled by the caller, re-recorded freely).
  virtual std::unique_ptr<Event> createEvent() = 0;
  virtual void record(Event& e, Stream& s) = 0;
  virtual void wait(Stream& s, Event& e) = 0;
  virtual bool query(Event& e) = 0;
  virtual void synchronize(Event& e, Duration timeout) = 0;
  virtual void synchronize(Stream& s, Duration timeout) = 0;

  // Data kernels, enqueued on `s`. The pattern is element k = value + step*k
  // (common/elements.h). check() accumulates into `out` and tags a failing
  // execution with `execution` (see CheckRecord).
  virtual void fill(Stream& s, void* dst, DType t, std::size_t count, int64_t value,
                    int64_t step) = 0;
  virtual void copy(Stream& s, void* dst, const void* src, std::size_t bytes) = 0;
  virtual void check(Stream& s, const void* src, DType t, std::size_t count, int64_t value,
                     int64_t step, double tolerance, CheckRecord* out, int64_t execution) = 0;
  // Runs `fn` on a host thread once the work enqueued before it on `s` is
  // done; work after it waits for fn to return (cudaLaunchHostFunc).
  virtual void launchHostFunc(Stream& s, std::function<void()> fn) = 0;

  // --- Optional: IPC (supports(DeviceFeature::Ipc)). ---
  // `p` must be the start of an allocate()d block.
  virtual MemoryHandle exportMemory(void* p);
  virtual void* importMemory(const MemoryHandle& h);
  virtual void closeImported(void* p);

  // --- Optional: compute (supports(DeviceFeature::Compute)), on `s`. ---
  virtual void matmul(Stream& s, const MatmulArgs& args);
  // out[i] = a[i] + b[i] for `count` elements of dtype `t` (out may be a or b).
  virtual void add(Stream& s, void* out, const void* a, const void* b, DType t,
                   std::size_t count);

  // --- Optional: reductions across buffers (supports(DeviceFeature::Reduce)), on `s`. ---
  // dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i] for `count` elements of dtype `t`,
  // combined left to right in the order of `srcs` (as common/reductions.h combines: float16 and
  // bfloat16 in float, rounded back to the dtype after every step; integers wrap), so that every
  // rank reducing the same sources in the same order gets the same bits; avg: the sum, then divided
  // by `sources` in the dtype (integers truncate toward zero). dst may be one of the sources
  // (each element is read before it is written); sources may be a peer's mapped memory (ipc).
  // srcs[0, sources), 1 <= sources <= kMaxReduceSources; the pointer list and `sync` (null:
  // every source is where srcs says, nothing waited for or signaled; see MessageStep, whose
  // pulls must be empty) are copied before the call returns.
  virtual void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
                      ReduceOp op, std::size_t count, const MessageStep* sync);
  void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
              ReduceOp op, std::size_t count) {
    reduce(s, dst, srcs, sources, t, op, count, nullptr);
  }

  // --- Optional: the native stream behind `s` (cudaStream_t for cuda), for
  // kernels an embedder registers; nullptr where there is none (host: such a
  // kernel enqueues its work with launchHostFunc). Asking for it counts as
  // work enqueued on `s` (the caller is about to enqueue some). ---
  virtual void* nativeStream(Stream& s);

  // --- Optional: timing (supports(DeviceFeature::Timing)). An event that
  // records when the stream reached it, for traces: record() and wait() take
  // it like any event. elapsedMs(from, to): milliseconds between two such
  // events, both complete (query() true). ---
  virtual std::unique_ptr<Event> createTimingEvent();
  virtual double elapsedMs(Event& from, Event& to);

  // --- Optional: giving up. cancel(why) abandons the work enqueued so far,
  // so that destroying the device after a failure or a timeout does not wait
  // for it: afterwards the device's sticky error is `why` (query/synchronize
  // throw BackendError). The host device's blocked stream tasks stop
  // waiting and its queued tasks are skipped. A GPU's work in flight cannot
  // be taken back: the cuda device's teardown then waits for it at most 2 s
  // (the backends' abort released what it waited on) and leaves the rest to
  // the process exit. Default: nothing. ---
  virtual void cancel(std::string_view why);

  // --- Optional: graphs (supports(DeviceFeature::Graphs)). beginCapture(s)
  // makes the calling thread's work on `s` (and on every stream that waits
  // on an event recorded in the capture) go into a graph instead of
  // running (CUDA stream capture, thread-local mode). endCapture(s), once
  // every such stream joined `s` again, ends it and returns the graph ready
  // to launch; launchGraph(g, s) enqueues one replay of it on `s` (any
  // stream of this device). While capturing, nothing may block the host on
  // the device, query an event, or wait on an event recorded before the
  // capture began; after it, events recorded during the capture must not
  // be waited on or queried. A failed capture still needs endCapture(),
  // which then throws BackendError saying why. Functions passed to
  // launchHostFunc during a capture run once per replay. ---
  virtual void beginCapture(Stream& s);
  virtual std::unique_ptr<Graph> endCapture(Stream& s);
  virtual void launchGraph(Graph& g, Stream& s);

  // --- Optional: stream semaphores (supports(DeviceFeature::StreamSemaphore)). ---
  // `addr` is device-visible memory of a uint32 (possibly a peer's, imported).
  // waitValue waits until (int32_t)(*addr - at_least) >= 0: a cyclic compare,
  // as cuStreamWaitValue32's GEQ, so values may wrap at 2^32 while a waiter
  // is less than 2^31 behind.
  virtual void writeValue(Stream& s, uint32_t* addr, uint32_t value);
  virtual void waitValue(Stream& s, const uint32_t* addr, uint32_t at_least);
  // waitValue(s, wait_addr, at_least), copy(s, dst, src, bytes), then
  // writeValue(s, signal_addr, value), as one step: what an ipc message's
  // copying side enqueues. Default: those three calls. A device may fuse
  // them (cuda: one kernel for copies up to HIR_CUDA_KERNEL_COPY_MAX).
  virtual void signaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                            const uint32_t* wait_addr, uint32_t at_least, uint32_t* signal_addr,
                            uint32_t value);

  // --- Optional: counted semaphores (supports(DeviceFeature::CountedSemaphore)):
  // enqueues `step` (see CountedStep) on `s`. cuda: kernels (one for copies up
  // to HIR_CUDA_KERNEL_COPY_MAX), capturable; host: stream tasks. ---
  virtual void countedStep(Stream& s, const CountedStep& step);

  // --- Optional, with stream semaphores (counted ones for parts with a
  // counter): the pushes and pulls of `step` (MessageStep; its reduction
  // sources unused), on `s`. The default does each as a signaledCopy (host
  // numbers: slotted parts not allowed) or a countedStep, pushes first;
  // cuda makes them one kernel when every part is at most
  // HIR_CUDA_KERNEL_COPY_MAX bytes. ---
  virtual void messageStep(Stream& s, const MessageStep& step);

  // --- Optional: inline flags (supports(DeviceFeature::InlineFlags)): the
  // largest message, in bytes, that MessageStep's parts may carry in lines
  // (inline_flags), on every path of messageStep and reduce. Default 0. ---
  virtual std::size_t inlineFlagsMax() const;
};

// Device factories, registered by name ("host", and "cuda" when built with
// CUDA). `index` picks the GPU (the local rank); the host device ignores it.
// `settings`: the session's (<hostir/settings.h>), which the device keeps
// what it needs of.
struct DeviceInfo {
  std::string name;
  // Is this kind usable here (cuda: a driver and at least one GPU)? If not,
  // `why` says why.
  std::function<bool(std::string* why)> available;
  std::function<std::unique_ptr<Device>(int index, const Settings& settings)> create;
};
void registerDevice(DeviceInfo info);
const std::vector<DeviceInfo>& registeredDevices();
// "auto" picks cuda when available, else host. Unknown or unavailable
// names throw UsageError saying why. Without settings:
// Settings::fromEnvironment().
std::unique_ptr<Device> createDevice(std::string_view name, int index, const Settings& settings);
std::unique_ptr<Device> createDevice(std::string_view name, int index);

}  // namespace hir
