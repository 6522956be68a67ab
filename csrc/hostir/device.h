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
// cyclically), compute, elementwise reductions across buffers, timing and
// graphs. One extension point, messages(), is the library's own (see there).
#pragma once

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

class Settings;        // <hostir/settings.h>
class DeviceMessages;  // private to the library (Device::messages)

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

// An element a check read or expected: `i` for integer dtypes (exact, also
// int64 beyond 2^53), `f` for floating ones (CheckRecord::integer says which).
union CheckValue {
  double f;
  int64_t i;
};

// Where a check writes what it found. Lives in host-visible memory
// (Device::allocateCheckRecords) and is read by the host after the work ran.
struct CheckRecord {
  static constexpr int kMaxReported = 4;
  uint64_t mismatches = 0;  // over every execution that wrote here
  uint64_t checked = 0;     // elements checked
  int64_t first_execution = -1;  // execution id of the first failing execution
  int32_t reported = 0;          // entries in index/got/expected (of that execution)
  int32_t integer = 0;           // 1: got/expected hold CheckValue::i, else ::f
  int64_t index[kMaxReported] = {};
  CheckValue got[kMaxReported] = {};
  CheckValue expected[kMaxReported] = {};
};

// How close a checked element must be: |got - expected| <= atol + rtol *
// |expected| (NumPy's allclose); NaN never matches. Integer dtypes compare
// exactly when both are 0. A bare number is an absolute tolerance.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  Tolerance(double absolute = 0.0, double relative = 0.0)  // NOLINT: implicit from atol
      : atol(absolute), rtol(relative) {}
};

// fillRandom's values: element k of the span is a function of (seed, k)
// only (common/random.h), the same on every device: uniform in [low, high)
// for floating dtypes (then rounded to the dtype), a uniform integer in
// [low, high) for integer ones (low and high whole numbers, converted as a
// C++ cast does). low < high.
struct RandomPattern {
  uint64_t seed = 0;
  double low = 0.0, high = 1.0;
};

// out[i] = op(in[i]) for `count` elements (UnaryOp in <hostir/types.h>).
// Cast converts only; the others compute in float (double for float64) and
// round to the output's dtype: relu max(x, 0), gelu the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), silu x / (1 + e^-x),
// scale x * factor (the product in double, then rounded). Cast: any dtypes (floating to
// integer truncates toward zero and saturates, NaN gives 0; integer to
// integer wraps as a C++ cast; integer or floating to floating rounds to
// nearest). The others: in and out of one floating dtype. out may be in.
struct UnaryArgs {
  UnaryOp op = UnaryOp::Cast;
  const void* in = nullptr;
  DType in_type = DType::Float32;
  void* out = nullptr;
  DType out_type = DType::Float32;
  std::size_t count = 0;
  double factor = 1.0;  // Scale
};

// Optional capabilities.
enum class DeviceFeature : uint8_t {
  Ipc,              // exportMemory / importMemory
  StreamSemaphore,  // writeValue / waitValue
  Compute,          // matmul / add
  Timing,           // createTimingEvent / elapsedMs
  Graphs,           // beginCapture / endCapture / launchGraph
  Reduce,           // reduce
};

// The most sources one Device::reduce combines.
inline constexpr std::size_t kMaxReduceSources = 16;

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
                     int64_t step, Tolerance tolerance, CheckRecord* out, int64_t execution) = 0;
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
  // See UnaryArgs.
  virtual void unary(Stream& s, const UnaryArgs& args);
  // dst[k] = the random pattern's element k, for k in [0, count).
  virtual void fillRandom(Stream& s, void* dst, DType t, std::size_t count,
                          const RandomPattern& pattern);
  // check() against a tensor: got[k] (dtype t) against expected[k] (dtype
  // et, any), both read as double (integers exactly as int64 when both are
  // integer dtypes and the tolerance is 0).
  virtual void checkAgainst(Stream& s, const void* got, DType t, const void* expected, DType et,
                            std::size_t count, Tolerance tolerance, CheckRecord* out,
                            int64_t execution);

  // --- Optional: reductions across buffers (supports(DeviceFeature::Reduce)), on `s`. ---
  // dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i] for `count` elements of dtype `t`,
  // combined left to right in the order of `srcs` (as common/reductions.h combines: float16 and
  // bfloat16 in float, rounded back to the dtype after every step; integers wrap), so that every
  // rank reducing the same sources in the same order gets the same bits; avg: the sum, then divided
  // by `sources` in the dtype (integers truncate toward zero). dst may be one of the sources
  // (each element is read before it is written); sources may be a peer's mapped memory (ipc).
  // srcs[0, sources), 1 <= sources <= kMaxReduceSources; the pointer list is copied before the
  // call returns.
  virtual void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
                      ReduceOp op, std::size_t count);

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

  // --- Extension: the protocol of a backend that maps peer memory (ipc),
  // private to the library. An embedder's device returns nullptr (the
  // default), and ipc then runs its protocol over the public stream
  // semaphores above (with IPC, and reduce for its collectives). ---
  virtual DeviceMessages* messages();
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
  // Its devices support DeviceFeature::Graphs: what a launcher, which makes
  // no device, asks before it accepts graph mode.
  bool graphs = false;
};
void registerDevice(DeviceInfo info);
const std::vector<DeviceInfo>& registeredDevices();
// "auto" picks cuda when available, else host. Unknown or unavailable
// names throw UsageError saying why. Without settings:
// Settings::fromEnvironment().
std::unique_ptr<Device> createDevice(std::string_view name, int index, const Settings& settings);
std::unique_ptr<Device> createDevice(std::string_view name, int index);

}  // namespace hir
