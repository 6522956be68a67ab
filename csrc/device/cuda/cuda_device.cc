// The CUDA device. See cuda_device.h for the behaviour and cuda_interop.h for
// what other GPU code may use of it (implemented in cuda_interop.cc). One
// implementation of the Device interface (kernels are in cuda_kernels.cu,
// cuBLAS in cuda_compute.cc, driver entry points in driver_api.cc).
#include "device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>

#include "common/check.h"
#include "common/log.h"
#include "common/parse_int.h"
#include "device/compute.h"
#include "device/cuda_interop.h"
#include "device/host_memory.h"
#include "device/cuda/cuda_compute.h"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda/driver_api.h"
#include "device/cuda/kernel_stamps.h"
#include "device/cuda/test_kernels.h"

namespace hir::cuda {

namespace {

// Size of a zero-byte allocation: a real, unique block of CUDA's alignment.
constexpr std::size_t kZeroByteAllocation = 256;
// How long allocate() waits for its zeroing, and the destructor for the
// default stream before it frees what was left allocated.
constexpr Duration kHousekeepingTimeout = std::chrono::seconds(60);
// After cancel(): the backends' abort released what the GPU waited on
// (ncclCommAbort, ipc's abort flag), so what is left drains in moments; a
// device that still does not is left to the process exit rather than
// holding the rank past its timeout (docs/cli.md, "Timeouts").
constexpr Duration kCancelledDrainTimeout = std::chrono::seconds(2);

}  // namespace

// ----------------------------------------------------------------- the device

namespace {

// Copies up to this many bytes run as a kernel rather than on a copy engine:
// a kernel starts sooner, which is what small messages (ipc) wait for.
// HIR_CUDA_KERNEL_COPY_MAX overrides it (bytes; 0: always the copy engine).
constexpr std::size_t kDefaultKernelCopyMax = 64 * 1024;

std::size_t kernelCopyMax() {
  return static_cast<std::size_t>(
      envInteger("HIR_CUDA_KERNEL_COPY_MAX", static_cast<int64_t>(kDefaultKernelCopyMax), 0));
}

// HIR_CUDA_GRID_COPY_WAIT: "kernel" (default): each block of a grid
// signaled copy waits in the kernel, which then starts copying as soon as
// the flag is set; "stream": a stream wait before the kernel, so that no
// block is resident while it waits, at the cost of a kernel launch after
// the wait (on one H100 under MPS a 1 MiB put ping-pong took 9.0 us so,
// against 7.2 with the wait in the kernel and 7.8 by the copy engine).
bool gridCopyWaitsInKernel() {
  const char* text = std::getenv("HIR_CUDA_GRID_COPY_WAIT");
  if (text == nullptr || *text == '\0') return true;
  const std::string_view v(text);
  HIR_CHECK_AS(UsageError, v == "stream" || v == "kernel",
               "HIR_CUDA_GRID_COPY_WAIT is '{}'; expected kernel (the grid copy's blocks wait, "
               "the default) or stream (a stream wait before its kernel)",
               text);
  return v == "kernel";
}

// Signaled copies above HIR_CUDA_KERNEL_COPY_MAX and up to
// HIR_CUDA_GRID_COPY_MAX bytes (default kDefaultGridCopyMax; 0: none) run
// as one kernel of a grid of blocks instead of a stream wait, a copy
// engine's copy and a stream write. Each block copies about
// kGridCopyBlockBytes, and a grid has at most HIR_CUDA_GRID_COPY_BLOCKS
// blocks (default kDefaultGridCopyBlocks): few enough that the grids of
// every lane of a rank of 8, waiting at once, hold well under the GPU's
// resident blocks. On one H100 (2 ranks under MPS) 16 blocks were faster
// than the copy engine from 256 KiB to 1 MiB (a put stream of 256 KiB
// messages 6.7 against 9.7 us each) and slower at 4 MiB (12.1 against 9.4).
constexpr std::size_t kDefaultGridCopyMax = std::size_t{1} << 20;
constexpr std::size_t kGridCopyBlockBytes = 32 * 1024;
constexpr int kDefaultGridCopyBlocks = 16;

std::size_t gridCopyMax() {
  return static_cast<std::size_t>(
      envInteger("HIR_CUDA_GRID_COPY_MAX", static_cast<int64_t>(kDefaultGridCopyMax), 0));
}

int gridCopyBlocks() {
  return static_cast<int>(envInteger("HIR_CUDA_GRID_COPY_BLOCKS", kDefaultGridCopyBlocks, 2, 256));
}

// HIR_CUDA_PDL: 1 (default) launches one-block kernels as programmatic
// dependents of the kernel before them (setProgrammaticLaunch), 0 plainly.
bool programmaticLaunch() {
  const char* text = std::getenv("HIR_CUDA_PDL");
  if (text == nullptr || *text == '\0') return true;
  const std::string_view v(text);
  HIR_CHECK_AS(UsageError, v == "0" || v == "1",
               "HIR_CUDA_PDL is '{}'; expected 1 (launch one-block kernels as programmatic "
               "dependents, the default) or 0",
               text);
  return v == "1";
}

// HIR_CUDA_SEMAPHORES: how waitValue and writeValue run. "memop" (default):
// the driver's stream memory operations (cuStreamWaitValue32 /
// cuStreamWriteValue32), which hold no SM while they wait; "kernel": a
// one-block kernel whose thread 0 polls the word, or releases the value, at
// system scope (what the fused signaled copies and the counted steps do
// already). On one H100 under MPS memops were faster (docs/ipc.md, "Kernel
// semaphores"); 2 GPUs are yet to be compared.
bool kernelSemaphores() {
  const char* text = std::getenv("HIR_CUDA_SEMAPHORES");
  if (text == nullptr || *text == '\0') return false;
  const std::string_view v(text);
  HIR_CHECK_AS(UsageError, v == "kernel" || v == "memop",
               "HIR_CUDA_SEMAPHORES is '{}'; expected memop (the driver's stream memory "
               "operations, the default) or kernel (one-block kernels poll and release the "
               "semaphore words)",
               text);
  return v == "kernel";
}

// The sticky error of failed host functions, shared with the tasks in
// flight so that a task finishing after the device is gone stays safe.
struct StickyError {
  std::mutex mutex;
  std::string message;  // empty: none

  void set(std::string text) {
    std::lock_guard lock(mutex);
    if (message.empty()) message = std::move(text);
  }
  std::string get() {
    std::lock_guard lock(mutex);
    return message;
  }
};

struct HostTask {
  std::function<void()> fn;
  std::shared_ptr<StickyError> sticky;
  int ordinal;
  bool keep = false;  // captured into a graph: runs once per replay, owned by the graph
};

void CUDART_CB runHostTask(void* data) {
  auto* raw = static_cast<HostTask*>(data);
  std::unique_ptr<HostTask> task(raw->keep ? nullptr : raw);
  try {
    raw->fn();
  } catch (const std::exception& e) {
    raw->sticky->set(fmt::format("cuda: a host function on device {} failed: {}", raw->ordinal,
                                 e.what()));
  } catch (...) {
    raw->sticky->set(fmt::format(
        "cuda: a host function on device {} failed with an unknown exception", raw->ordinal));
  }
}

// An instantiated graph and the host functions captured into it.
class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::vector<std::unique_ptr<HostTask>> tasks, int ordinal)
      : exec_(exec), tasks_(std::move(tasks)), ordinal_(ordinal) {}
  ~CudaGraph() override {
    activateQuietly(ordinal_);
    (void)cudaGraphExecDestroy(exec_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
  std::vector<std::unique_ptr<HostTask>> tasks_;
  int ordinal_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) {
    HIR_CHECK_AS(UsageError, index >= 0, "cuda: device index must be >= 0, got {}", index);
    int count = 0;
    HIR_CUDA_CHECK(index, cudaGetDeviceCount(&count));
    HIR_CHECK_AS(BackendError, count > 0, "cuda: no GPU is visible (device index {})", index);
    ordinal_ = index % count;
    blas_ = std::make_unique<Cublas>(ordinal_);
    activate(ordinal_);
    cudaDeviceProp props{};
    HIR_CUDA_CHECK(ordinal_, cudaGetDeviceProperties(&props, ordinal_));
    name_ = props.name;
    max_blocks_ = std::max(1, props.multiProcessorCount) * 8;
    kernel_copy_max_ = kernelCopyMax();
    grid_copy_max_ = gridCopyMax();
    grid_wait_in_kernel_ = gridCopyWaitsInKernel();
    pull_fence_ = envSwitch("HIR_CUDA_PULL_FENCE", "grid pulls fence at system scope");
    grid_copy_blocks_ = gridCopyBlocks();
    kernel_semaphores_ = kernelSemaphores();
    // Programmatic dependent launch exists from compute capability 9.0.
    setProgrammaticLaunch(programmaticLaunch() && props.major >= 9);
    // HIR_CUDA_SPREAD_SOURCES (1 by default): setSpreadSources.
    setSpreadSources(envSwitch("HIR_CUDA_SPREAD_SOURCES",
                               "a small reduction's sources in lines are loaded at once", true));
    // HIR_CUDA_PUSHES_AT_ONCE (1 by default): setPushesAtOnce.
    setPushesAtOnce(envSwitch("HIR_CUDA_PUSHES_AT_ONCE",
                              "a step's small pushes in lines go each in a warp of its own", true));
    HIR_CUDA_CHECK(ordinal_, preloadKernels());
    stamps_ = KernelStampRing::fromEnv(ordinal_);  // HIR_CUDA_STAMPS
    cudaStream_t s = nullptr;
    HIR_CUDA_CHECK(ordinal_, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    default_stream_ = std::make_unique<CudaStream>(s, ordinal_, /*owned=*/true, default_counter_);
    HIR_CUDA_CHECK(ordinal_, cudaStreamCreateWithFlags(&zero_stream_, cudaStreamNonBlocking));
  }

  ~CudaDevice() override {
    activateQuietly(ordinal_);
    // Memory the owner left allocated is freed only once the default stream
    // drained: cudaFree waits for the whole device, and must not hang here.
    bool drained = false;
    try {
      drained = drain(default_stream_->native(),
                      cancelled_ ? kCancelledDrainTimeout : kHousekeepingTimeout);
    } catch (const std::exception&) {
      drained = false;
    }
    if (stamps_ != nullptr && drained) {
      stamps_->save();
    } else if (stamps_ != nullptr) {
      // Kernels may still write into the ring, which stays to the process
      // exit (cudaFree would wait for them).
      (void)stamps_.release();
    }
    stamps_.reset();
    if (drained) {
      for (auto& [p, bytes] : allocations_) (void)cudaFree(p);
      for (auto& [base, block] : check_blocks_) (void)cudaFreeHost(reinterpret_cast<void*>(base));
      for (auto& [p, refs] : imports_)
        for (int i = 0; i < refs; ++i) (void)cudaIpcCloseMemHandle(p);
    } else if (!allocations_.empty() || !check_blocks_.empty() || !imports_.empty()) {
      HIR_LOG_WARN(Subsys::Cuda,
                   "cuda device {} destroyed while its default stream is still busy; leaving {} "
                   "allocation(s) to the process exit",
                   ordinal_, allocations_.size());
    }
    releaseHousekeeping();
    if (!drained) blas_->abandon();  // cublasDestroy would wait for the whole device
    blas_.reset();
    default_stream_.reset();
    (void)cudaGetLastError();
  }

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int ordinal() const { return ordinal_; }

  std::string_view kind() const override { return "cuda"; }
  std::string describe() const override { return fmt::format("cuda:{} ({})", ordinal_, name_); }

  bool supports(DeviceFeature f) const override {
    switch (f) {
      case DeviceFeature::Ipc: return true;
      case DeviceFeature::StreamSemaphore: return driverApi().hasStreamMemOps();
      case DeviceFeature::Compute: return true;
      case DeviceFeature::Timing: return true;
      case DeviceFeature::Graphs: return true;
      case DeviceFeature::CountedSemaphore: return true;
      case DeviceFeature::Reduce: return true;
      case DeviceFeature::InlineFlags: return true;
    }
    return false;
  }

  // --------------------------------------------------------------- memory

  void* allocate(std::size_t bytes) override {
    activate(ordinal_);
    const std::size_t size = bytes ? bytes : kZeroByteAllocation;
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: the device stays usable
      throw RuntimeError(outOfMemory(size));
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw BackendError(fmt::format("cuda: cudaMalloc of {} bytes failed on device {}: {} ({})",
                                     size, ordinal_, cudaGetErrorString(err),
                                     cudaGetErrorName(err)));
    }
    try {
      std::lock_guard lock(mutex_);
      HIR_CUDA_CHECK(ordinal_, cudaMemsetAsync(p, 0, size, zero_stream_));
      HIR_CHECK_AS(TimeoutError, drain(zero_stream_, kHousekeepingTimeout),
                   "cuda: zeroing a new allocation of {} bytes on device {} took more than {} ms",
                   size, ordinal_, kHousekeepingTimeout.count());
      allocations_.emplace(p, size);
    } catch (...) {
      (void)cudaFree(p);
      throw;
    }
    return p;
  }

  // What a refused cudaMalloc says: the bytes asked for and what the GPU
  // has (another process may hold the rest).
  std::string outOfMemory(std::size_t size) const {
    std::size_t free_bytes = 0, total_bytes = 0;
    std::string have = "cudaMemGetInfo failed too";
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      have = fmt::format("{} free of {} (cudaMemGetInfo)", describeBytes(free_bytes),
                         describeBytes(total_bytes));
    (void)cudaGetLastError();
    return fmt::format("cuda: cannot allocate {} on device {} ({}): out of GPU memory, {}",
                       describeBytes(size), ordinal_, name_, have);
  }

  void deallocate(void* p) override {
    if (p == nullptr) return;
    activate(ordinal_);
    {
      std::lock_guard lock(mutex_);
      HIR_INTERNAL_ASSERT(allocations_.erase(p) == 1,
                          "cuda deallocate: {} is not a live allocation of device {}", p,
                          ordinal_);
    }
    // cudaFree waits for the work in flight on the device, like the host
    // device's deallocate.
    HIR_CUDA_CHECK(ordinal_, cudaFree(p));
  }

  CheckRecord* allocateCheckRecords(std::size_t n) override {
    activate(ordinal_);
    const std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(CheckRecord);
    void* host = nullptr;
    HIR_CUDA_CHECK(ordinal_,
                   cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    auto* records = static_cast<CheckRecord*>(host);
    for (std::size_t i = 0; i < std::max<std::size_t>(n, 1); ++i)
      new (records + i) CheckRecord();  // zeros, first_execution = -1
    void* device = nullptr;
    cudaError_t err = cudaHostGetDevicePointer(&device, host, 0);
    if (err != cudaSuccess) {
      (void)cudaFreeHost(host);
      throwCudaError(err, "cudaHostGetDevicePointer", ordinal_);
    }
    std::lock_guard lock(mutex_);
    check_blocks_[reinterpret_cast<uintptr_t>(host)] = {bytes, device};
    return records;
  }

  void freeCheckRecords(CheckRecord* p) override {
    if (p == nullptr) return;
    activate(ordinal_);
    {
      std::lock_guard lock(mutex_);
      HIR_INTERNAL_ASSERT(check_blocks_.erase(reinterpret_cast<uintptr_t>(p)) == 1,
                          "cuda freeCheckRecords: {} was not allocated by device {}",
                          static_cast<void*>(p), ordinal_);
    }
    HIR_CUDA_CHECK(ordinal_, cudaFreeHost(p));
  }

  // -------------------------------------------------------------- streams

  Stream& defaultStream() override { return *default_stream_; }

  std::unique_ptr<Stream> createStream() override {
    activate(ordinal_);
    cudaStream_t s = nullptr;
    HIR_CUDA_CHECK(ordinal_, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::make_unique<CudaStream>(s, ordinal_, /*owned=*/true, newCounter());
  }

  std::unique_ptr<Stream> wrapStream(void* native) override {
    if (native == nullptr)
      return std::make_unique<CudaStream>(default_stream_->native(), ordinal_, /*owned=*/false,
                                          default_counter_);
    auto s = static_cast<cudaStream_t>(native);
    activate(ordinal_);
    int device = -1;
    // A stream of another GPU would fail later with an obscure error; say it
    // now. Special handles (cudaStreamLegacy, ...) report the current device.
    if (cudaStreamGetDevice(s, &device) == cudaSuccess) {
      HIR_CHECK_AS(UsageError, device == ordinal_,
                   "cuda: the stream passed to hostir belongs to device {}, but hostir runs on "
                   "device {} (the local rank modulo the GPU count)",
                   device, ordinal_);
    } else {
      (void)cudaGetLastError();
    }
    return std::make_unique<CudaStream>(s, ordinal_, /*owned=*/false, nullptr);  // untracked
  }

  // --------------------------------------------------------------- events

  std::unique_ptr<Event> createEvent() override {
    activate(ordinal_);
    cudaEvent_t e = nullptr;
    HIR_CUDA_CHECK(ordinal_, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return std::make_unique<CudaEvent>(e, ordinal_);
  }

  void record(Event& e, Stream& s) override {
    activate(ordinal_);
    HIR_CUDA_CHECK(ordinal_,
                   cudaEventRecord(nativeEvent(e, "record"), cuda::nativeStream(s, "record")));
  }

  void wait(Stream& s, Event& e) override {
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "wait");
    HIR_CUDA_CHECK(ordinal_, cudaStreamWaitEvent(cs.native(), nativeEvent(e, "wait"), 0));
    cs.noteWork();
  }

  bool query(Event& e) override {
    throwIfSticky();
    activate(ordinal_);
    cudaError_t err = cudaEventQuery(nativeEvent(e, "query"));
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) return false;
    throwCudaError(err, "cudaEventQuery", ordinal_);
  }

  void synchronize(Event& e, Duration timeout) override {
    throwIfSticky();
    activate(ordinal_);
    HIR_CHECK_AS(TimeoutError, pollEvent(nativeEvent(e, "synchronize"), timeout, ordinal_),
                 "cuda: an event on device {} did not complete within {} ms", ordinal_,
                 timeout.count());
    throwIfSticky();
  }

  // The GPU's work in flight cannot be taken back: what cancel() changes is
  // that later waits fail at once (the sticky error) and that teardown
  // waits for the GPU only briefly.
  void cancel(std::string_view why) override {
    HIR_LOG_INFO(Subsys::Cuda, "queued work cancelled: {}", why);
    sticky_->set(std::string(why));
    cancelled_ = true;
  }

  void synchronize(Stream& s, Duration timeout) override {
    throwIfSticky();
    activate(ordinal_);
    HIR_CHECK_AS(TimeoutError, drain(cuda::nativeStream(s, "synchronize"), timeout),
                 "cuda: a stream on device {} did not drain within {} ms", ordinal_,
                 timeout.count());
    throwIfSticky();
  }

  // --------------------------------------------------------- data kernels

  void fill(Stream& s, void* dst, DType t, std::size_t count, int64_t value,
            int64_t step) override {
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "fill");
    HIR_CUDA_CHECK(ordinal_, launchFill(cs.native(), dst, t, count, value, step, max_blocks_));
    cs.noteWork();
  }

  void copy(Stream& s, void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "copy");
    if (bytes <= kernel_copy_max_)
      HIR_CUDA_CHECK(ordinal_, launchCopy(cs.native(), dst, src, bytes, max_blocks_));
    else
      HIR_CUDA_CHECK(ordinal_,
                     cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cs.native()));
    cs.noteWork();
  }

  void check(Stream& s, const void* src, DType t, std::size_t count, int64_t value, int64_t step,
             double tolerance, CheckRecord* out, int64_t execution) override {
    activate(ordinal_);
    CheckRecord* device_record = devicePointerOf(out);
    CudaStream& cs = cudaStream(s, "check");
    HIR_CUDA_CHECK(ordinal_, launchCheck(cs.native(), src, t, count, value, step, tolerance,
                                         device_record, execution, max_blocks_));
    cs.noteWork();
  }

  void launchHostFunc(Stream& s, std::function<void()> fn) override {
    activate(ordinal_);
    auto task = std::make_unique<HostTask>(HostTask{std::move(fn), sticky_, ordinal_});
    CudaStream& cs = cudaStream(s, "launchHostFunc");
    task->keep = capturing_;
    HIR_CUDA_CHECK(ordinal_, cudaLaunchHostFunc(cs.native(), runHostTask, task.get()));
    if (capturing_)
      captured_tasks_.push_back(std::move(task));  // the graph's, run once per replay
    else
      task.release();  // runHostTask owns it now
    cs.noteWork();
  }

  // --------------------------------------------------------------- graphs

  void beginCapture(Stream& s) override {
    HIR_INTERNAL_ASSERT(!capturing_, "cuda: beginCapture during a capture");
    throwIfSticky();
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "beginCapture");
    if (grid_copy_max_ > kernel_copy_max_) {
      // Grid copies under capture take a word each, and nothing can be
      // allocated once the capture began.
      std::lock_guard<std::mutex> lock(arrivals_mutex_);
      if (arrival_left_ < kArrivalSlabWords / 2) addArrivalSlab();
    }
    HIR_CUDA_CHECK(ordinal_, cudaStreamBeginCapture(cs.native(), cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    captured_tasks_.clear();
    cs.noteWork();
  }

  std::unique_ptr<Graph> endCapture(Stream& s) override {
    HIR_INTERNAL_ASSERT(capturing_, "cuda: endCapture without beginCapture");
    capturing_ = false;
    std::vector<std::unique_ptr<HostTask>> tasks = std::move(captured_tasks_);
    captured_tasks_.clear();
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "endCapture");
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(cs.native(), &graph);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (graph) (void)cudaGraphDestroy(graph);
      throw BackendError(fmt::format(
          "cuda: capturing a graph on device {} failed: {} ({}): something in the captured work "
          "was not capturable, or a stream forked from the capture did not join it again",
          ordinal_, cudaGetErrorString(err), cudaGetErrorName(err)));
    }
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throwCudaError(err, "cudaGraphInstantiate", ordinal_);
    }
    cs.noteWork();
    return std::make_unique<CudaGraph>(exec, std::move(tasks), ordinal_);
  }

  void launchGraph(Graph& g, Stream& s) override {
    auto* graph = dynamic_cast<CudaGraph*>(&g);
    HIR_INTERNAL_ASSERT(graph != nullptr, "cuda: launchGraph of a graph of another device");
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "launchGraph");
    HIR_CUDA_CHECK(ordinal_, cudaGraphLaunch(graph->exec(), cs.native()));
    cs.noteWork();
  }

  // -------------------------------------------------------------- compute

  void matmul(Stream& s, const MatmulArgs& args) override {
    checkMatmulArgs(args, "cuda");
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "matmul");
    blas_->matmul(cs.native(), args);
    cs.noteWork();
  }

  void add(Stream& s, void* out, const void* a, const void* b, DType t,
           std::size_t count) override {
    if (count == 0) return;
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "add");
    HIR_CUDA_CHECK(ordinal_, launchAdd(cs.native(), out, a, b, t, count, max_blocks_));
    cs.noteWork();
  }

  using Device::reduce;
  void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
              ReduceOp op, std::size_t count, const MessageStep* sync) override {
    checkReduceArgs(dst, srcs, sources, count, sync, "cuda");
    if (count == 0 && sync == nullptr) return;
    activate(ordinal_);
    // Pushes, waits and signals fused into the reduction up to the size of a
    // fused copy (HIR_CUDA_KERNEL_COPY_MAX): one block. Pushes larger than
    // that go first, as messageStep would do them.
    MessageStep rest;
    if (sync != nullptr && sync->push_count > 0 && !fusable(*sync)) {
      MessageStep pushes = *sync;
      pushes.pull_count = 0;
      messageStep(s, pushes);
      rest = *sync;
      rest.push_count = 0;
      sync = &rest;
    }
    CudaStream& cs = cudaStream(s, "reduce");
    // Above one block's size and up to HIR_CUDA_GRID_COPY_MAX, the waits,
    // the reduction and the signals are one grid kernel (launchReduce), as
    // a mid-size copy is; the grid's blocks are those of a grid copy of the
    // elements.
    const std::size_t bytes = count * dtypeSize(t);
    ReduceGrid grid;
    if (sync != nullptr && sync->push_count == 0 && bytes > kernel_copy_max_ &&
        bytes <= grid_copy_max_)
      grid = {arrivalsFor(cs), gridBlocks(bytes)};
    HIR_CUDA_CHECK(ordinal_, launchReduce(cs.native(), dst, srcs, static_cast<int>(sources), t,
                                          op, count, sync, max_blocks_, kernel_copy_max_, &grid,
                                          stampSink()));
    cs.noteWork();
  }

  // Several parts, each at most HIR_CUDA_KERNEL_COPY_MAX, or one with
  // direct delivery (device.h): one kernel of one block (the block copies
  // each). One part, or a larger one: each as its own counted step or
  // signaled copy (Device's default: a kernel with fewer arguments, or a
  // copy engine, which moves every message through its slot), but a part
  // in lines, which only the one-block kernel reads and writes: a kernel of
  // its own, in its turn.
  void messageStep(Stream& s, const MessageStep& step) override {
    const std::size_t parts = step.push_count + step.pull_count;
    auto part = [&](std::size_t k) -> const MessageStep::Copy& {
      return k < step.push_count ? step.pushes[k] : step.pulls[k - step.push_count];
    };
    bool lines = false, direct = false;
    for (std::size_t k = 0; k < parts; ++k) {
      lines = lines || part(k).inline_flags;
      direct = direct || asksDirect(part(k), k < step.push_count);
    }
    // Direct delivery in the one-block kernel only (larger parts ignore it).
    direct = direct && fusable(step);
    if (!lines && !direct && step.pull_count == 1 && parts == 1 && gridPull(s, step)) return;
    if (!lines && step.pull_count == 0 && step.push_count > 1 && gridPushes(s, step)) return;
    if (!lines && ((parts <= 1 && !direct) || !fusable(step)))
      return Device::messageStep(s, step);
    if (!fusable(step)) {
      HIR_INTERNAL_ASSERT(parts > 1, "messageStep: a part of {} bytes in lines, above {}",
                          part(0).bytes, inlineFlagsMax());
      for (std::size_t k = 0; k < parts; ++k) {
        MessageStep one = step;
        one.push_count = k < step.push_count ? 1 : 0;
        one.pull_count = 1 - one.push_count;
        (one.push_count == 1 ? one.pushes[0] : one.pulls[0]) = part(k);
        messageStep(s, one);
      }
      return;
    }
    for (std::size_t k = 0; k < parts; ++k) {
      const MessageStep::Copy& c = part(k);
      for (const uint32_t* word : {c.wait, static_cast<const uint32_t*>(c.signal),
                                   static_cast<const uint32_t*>(c.posted),
                                   static_cast<const uint32_t*>(c.mark)})
        if (word != nullptr) (void)semaphoreApi("messageStep", word);  // waitValue's checks
    }
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "messageStep");
    HIR_CUDA_CHECK(ordinal_, launchMessageStep(cs.native(), step, stampSink()));
    cs.noteWork();
  }

  // Parts in lines run in the one-block kernels, which take parts up to
  // HIR_CUDA_KERNEL_COPY_MAX.
  std::size_t inlineFlagsMax() const override { return kernel_copy_max_; }

  // The caller enqueues on it behind the device's back (an embedder's
  // kernel): counted as work, so that no backend skips a wait for it.
  void* nativeStream(Stream& s) override {
    CudaStream& cs = cudaStream(s, "nativeStream");
    cs.noteWork();
    return cs.native();
  }

  // --------------------------------------------------------------- timing

  std::unique_ptr<Event> createTimingEvent() override {
    activate(ordinal_);
    cudaEvent_t e = nullptr;
    HIR_CUDA_CHECK(ordinal_, cudaEventCreateWithFlags(&e, cudaEventDefault));
    return std::make_unique<CudaEvent>(e, ordinal_);
  }

  double elapsedMs(Event& from, Event& to) override {
    throwIfSticky();
    activate(ordinal_);
    float ms = 0;
    cudaError_t err = cudaEventElapsedTime(&ms, nativeEvent(from, "elapsedMs"),
                                           nativeEvent(to, "elapsedMs"));
    HIR_INTERNAL_ASSERT(err != cudaErrorNotReady,
                        "elapsedMs on device {}: an event has not completed", ordinal_);
    cudaCheck(err, "cudaEventElapsedTime", ordinal_);
    return ms;
  }

  // ------------------------------------------------------------------ IPC

  MemoryHandle exportMemory(void* p) override {
    {
      std::lock_guard lock(mutex_);
      HIR_INTERNAL_ASSERT(allocations_.count(p) == 1,
                          "cuda exportMemory: {} is not the start of an allocation of device {}",
                          p, ordinal_);
    }
    activate(ordinal_);
    cudaIpcMemHandle_t handle{};
    HIR_CUDA_CHECK(ordinal_, cudaIpcGetMemHandle(&handle, p));
    MemoryHandle out;
    out.bytes.resize(sizeof(handle));
    std::memcpy(out.bytes.data(), &handle, sizeof(handle));
    return out;
  }

  void* importMemory(const MemoryHandle& h) override {
    HIR_CHECK_AS(BackendError, h.bytes.size() == sizeof(cudaIpcMemHandle_t),
                 "cuda importMemory on device {}: expected a {}-byte CUDA IPC handle, got {} "
                 "bytes (exported by another device kind?)",
                 ordinal_, sizeof(cudaIpcMemHandle_t), h.bytes.size());
    cudaIpcMemHandle_t handle{};
    std::memcpy(&handle, h.bytes.data(), sizeof(handle));
    activate(ordinal_);
    void* p = nullptr;
    HIR_CUDA_CHECK(ordinal_, cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess));
    std::lock_guard lock(mutex_);
    ++imports_[p];  // CUDA counts opens of one handle; so do we, for cleanup
    return p;
  }

  void closeImported(void* p) override {
    {
      std::lock_guard lock(mutex_);
      auto it = imports_.find(p);
      HIR_INTERNAL_ASSERT(it != imports_.end(),
                          "cuda closeImported: {} is not memory imported on device {}", p,
                          ordinal_);
      if (--it->second == 0) imports_.erase(it);
    }
    activate(ordinal_);
    HIR_CUDA_CHECK(ordinal_, cudaIpcCloseMemHandle(p));
  }

  // ----------------------------------------------------- stream semaphores

  void writeValue(Stream& s, uint32_t* addr, uint32_t value) override {
    const DriverApi& api = semaphoreApi("writeValue", addr);
    if (kernel_semaphores_) return semaphoreKernel(s, "writeValue", nullptr, 0, addr, value);
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "writeValue");
    CUresult r = api.streamWriteValue32(cs.native(), reinterpret_cast<CUdeviceptr>(addr), value,
                                        CU_STREAM_WRITE_VALUE_DEFAULT);
    cs.noteWork();
    HIR_CHECK_AS(BackendError, r == CUDA_SUCCESS,
                 "cuda: cuStreamWriteValue32 of {} at {} failed on device {}: {}", value,
                 static_cast<void*>(addr), ordinal_, api.describe(r));
  }

  // Small copies (and none, with kernel semaphores): one kernel that waits,
  // copies and signals (a stream wait and a stream write each add a
  // dependent step before and after the copy kernel). Larger ones up to
  // HIR_CUDA_GRID_COPY_MAX: the same as one kernel of a grid
  // (gridSignaledCopy). Larger still: the three steps, the copy on a copy
  // engine.
  void signaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                    const uint32_t* wait_addr, uint32_t at_least, uint32_t* signal_addr,
                    uint32_t value) override {
    if (bytes > kernel_copy_max_ && bytes <= grid_copy_max_ && wait_addr != nullptr &&
        signal_addr != nullptr && gridSignaledCopy(s, dst, src, bytes, wait_addr, at_least,
                                                   signal_addr, value))
      return;
    if ((bytes == 0 && !kernel_semaphores_) || bytes > kernel_copy_max_)
      return Device::signaledCopy(s, dst, src, bytes, wait_addr, at_least, signal_addr, value);
    (void)semaphoreApi("signaledCopy", wait_addr);  // the same checks as waitValue
    (void)semaphoreApi("signaledCopy", signal_addr);
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "signaledCopy");
    HIR_CUDA_CHECK(ordinal_, launchSignaledCopy(cs.native(), dst, src, bytes, wait_addr, at_least,
                                                signal_addr, value));
    cs.noteWork();
  }

  // Kernels, so that a graph's replays count on (a stream memory
  // operation's value is fixed when it is enqueued). Copies larger than
  // HIR_CUDA_KERNEL_COPY_MAX: up to HIR_CUDA_GRID_COPY_MAX one grid kernel
  // (its blocks wait, whatever HIR_CUDA_GRID_COPY_WAIT says: the number is
  // known only on the device), above to a copy engine between two kernels;
  // the last kernel advances the counter.
  void countedStep(Stream& s, const CountedStep& st) override {
    HIR_INTERNAL_ASSERT(st.counter != nullptr, "countedStep without a counter");
    HIR_INTERNAL_ASSERT((st.slots & (st.slots - 1)) == 0,
                        "countedStep: {} slots is not a power of two", st.slots);
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "countedStep");
    uint32_t* arrivals = nullptr;
    if (st.bytes <= kernel_copy_max_) {
      HIR_CUDA_CHECK(ordinal_, launchCountedStep(cs.native(), st, st.advance, true, true));
    } else if (st.bytes <= grid_copy_max_ && (arrivals = arrivalsFor(cs)) != nullptr) {
      HIR_CUDA_CHECK(ordinal_,
                     launchGridCountedStep(cs.native(), st, arrivals, gridBlocks(st.bytes)));
    } else {
      const bool signals = st.signal_addr != nullptr;
      CountedStep none = st;
      none.bytes = 0;
      if (st.wait_addr != nullptr || (!signals && st.advance != 0))
        HIR_CUDA_CHECK(ordinal_,
                       launchCountedStep(cs.native(), none, signals ? 0 : st.advance, true, false));
      // A slot's address is known only on the device: a kernel copies it.
      if (st.slots > 0)
        HIR_CUDA_CHECK(ordinal_, launchSlotCopy(cs.native(), st, max_blocks_));
      else
        HIR_CUDA_CHECK(ordinal_, cudaMemcpyAsync(st.dst, st.src, st.bytes,
                                                 cudaMemcpyDeviceToDevice, cs.native()));
      if (signals)
        HIR_CUDA_CHECK(ordinal_, launchCountedStep(cs.native(), none, st.advance, false, true));
    }
    cs.noteWork();
  }

  void waitValue(Stream& s, const uint32_t* addr, uint32_t at_least) override {
    const DriverApi& api = semaphoreApi("waitValue", addr);
    if (kernel_semaphores_) return semaphoreKernel(s, "waitValue", addr, at_least, nullptr, 0);
    activate(ordinal_);
    // GEQ compares (int32_t)(*addr - at_least) >= 0: increasing sequence
    // numbers work across 32-bit wrap-around.
    CudaStream& cs = cudaStream(s, "waitValue");
    CUresult r = api.streamWaitValue32(cs.native(), reinterpret_cast<CUdeviceptr>(addr), at_least,
                                       CU_STREAM_WAIT_VALUE_GEQ);
    cs.noteWork();
    HIR_CHECK_AS(BackendError, r == CUDA_SUCCESS,
                 "cuda: cuStreamWaitValue32 (>= {}) at {} failed on device {}: {}", at_least,
                 static_cast<const void*>(addr), ordinal_, api.describe(r));
  }

 private:
  struct CheckBlock {
    std::size_t bytes = 0;
    void* device = nullptr;  // device view of the block's start
  };

  const DriverApi& semaphoreApi(const char* call, const void* addr) const {
    const DriverApi& api = driverApi();
    HIR_CHECK_AS(BackendError, api.hasStreamMemOps(),
                 "cuda: {} needs the stream memory operations, not available on device {}: {}",
                 call, ordinal_, api.missing);
    HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(addr) % alignof(uint32_t) == 0,
                        "cuda {}: semaphore address {} is not 4-byte aligned", call, addr);
    return api;
  }

  // Device view of a record inside a block from allocateCheckRecords().
  CheckRecord* devicePointerOf(CheckRecord* host) {
    const auto addr = reinterpret_cast<uintptr_t>(host);
    std::lock_guard lock(mutex_);
    auto it = check_blocks_.upper_bound(addr);
    HIR_INTERNAL_ASSERT(it != check_blocks_.begin(),
                        "cuda check: record {} was not allocated by device {}",
                        static_cast<void*>(host), ordinal_);
    --it;
    const std::size_t offset = addr - it->first;
    HIR_INTERNAL_ASSERT(offset + sizeof(CheckRecord) <= it->second.bytes,
                        "cuda check: record {} was not allocated by device {}",
                        static_cast<void*>(host), ordinal_);
    return reinterpret_cast<CheckRecord*>(static_cast<char*>(it->second.device) + offset);
  }

  // Waits for the work enqueued so far on `s`; false on timeout.
  bool drain(cudaStream_t s, Duration timeout) {
    cudaEvent_t e = nullptr;
    HIR_CUDA_CHECK(ordinal_, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    struct Destroy {
      cudaEvent_t e;
      ~Destroy() { (void)cudaEventDestroy(e); }
    } destroy{e};
    HIR_CUDA_CHECK(ordinal_, cudaEventRecord(e, s));
    return pollEvent(e, timeout, ordinal_);
  }

  void throwIfSticky() {
    std::string message = sticky_->get();
    if (!message.empty()) throw BackendError(message);
  }

  void releaseHousekeeping() {
    if (zero_stream_) (void)cudaStreamDestroy(zero_stream_);
    zero_stream_ = nullptr;
  }

  static CudaStream::Counter newCounter() { return std::make_shared<std::atomic<uint64_t>>(0); }

  int ordinal_ = 0;
  std::string name_;
  int max_blocks_ = 1;
  std::size_t kernel_copy_max_ = 0;  // copies up to this size run as a kernel
  std::size_t grid_copy_max_ = 0;    // signaled copies up to this size: a grid kernel
  bool grid_wait_in_kernel_ = true;  // HIR_CUDA_GRID_COPY_WAIT
  bool pull_fence_ = false;          // HIR_CUDA_PULL_FENCE (an experiment's A/B)
  int grid_copy_blocks_ = 2;          // HIR_CUDA_GRID_COPY_BLOCKS

  // Blocks of a grid copy of `bytes`.
  int gridBlocks(std::size_t bytes) const {
    return static_cast<int>(std::clamp<std::size_t>(
        (bytes + kGridCopyBlockBytes - 1) / kGridCopyBlockBytes, 2,
        static_cast<std::size_t>(grid_copy_blocks_)));
  }

  // A pull (a copy out of this rank's own slot, whose signal says only
  // that the slot was read) above HIR_CUDA_KERNEL_COPY_MAX, up to
  // HIR_CUDA_GRID_COPY_MAX: the grid kernel of a signaled copy or a
  // counted step without the fences that publish a push's data (`publish`
  // false). False: not done (another size, or no word under capture).
  bool gridPull(Stream& s, const MessageStep& step) {
    const MessageStep::Copy& c = step.pulls[0];
    if (c.bytes <= kernel_copy_max_ || c.bytes > grid_copy_max_ || c.wait == nullptr ||
        c.signal == nullptr || c.inline_flags)
      return false;
    const bool publish = pull_fence_;
    if (c.counter == nullptr) {
      if (c.slotted) return false;
      return gridSignaledCopy(s, c.dst, c.src, c.bytes, c.wait, c.number - c.wait_back, c.signal,
                              c.number, publish);
    }
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "messageStep");
    uint32_t* arrivals = arrivalsFor(cs);
    if (arrivals == nullptr) return false;
    HIR_CUDA_CHECK(ordinal_, launchGridCountedStep(cs.native(), countedStepOf(step, c, false),
                                                   arrivals, gridBlocks(c.bytes), publish));
    cs.noteWork();
    return true;
  }

  // Pushes only (ipc's puts and gets of one post, each to or from its own
  // peer), more than HIR_CUDA_KERNEL_COPY_MAX in all and each at most
  // HIR_CUDA_GRID_COPY_MAX: one grid kernel (launchGridMessageStep) whose
  // blocks are split among the pushes, gridBlocks of each (at most
  // kGridPushBlocks in all), so that they move at once on their links
  // instead of one after the other. Their waits are in the kernel whatever
  // HIR_CUDA_GRID_COPY_WAIT says. False: not done (another size, lines or
  // direct delivery, or no arrivals word under capture).
  bool gridPushes(Stream& s, const MessageStep& step) {
    std::size_t total = 0;
    for (std::size_t k = 0; k < step.push_count; ++k) {
      const MessageStep::Copy& c = step.pushes[k];
      if (c.bytes > grid_copy_max_ || c.inline_flags || asksDirect(c, true)) return false;
      total += c.bytes;
    }
    if (total <= kernel_copy_max_) return false;
    for (std::size_t k = 0; k < step.push_count; ++k)
      for (const uint32_t* word : {step.pushes[k].wait,
                                   static_cast<const uint32_t*>(step.pushes[k].signal)})
        if (word != nullptr) (void)semaphoreApi("messageStep", word);  // waitValue's checks
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "messageStep");
    uint32_t* arrivals = arrivalsFor(cs);
    if (arrivals == nullptr) return false;
    const int most = std::max(1, kGridPushBlocks / static_cast<int>(step.push_count));
    std::array<int, kMaxReduceSources> blocks{};
    for (std::size_t k = 0; k < step.push_count; ++k)
      blocks[k] = step.pushes[k].bytes == 0 ? 1 : std::min(gridBlocks(step.pushes[k].bytes), most);
    HIR_CUDA_CHECK(ordinal_, launchGridMessageStep(cs.native(), step, arrivals, blocks.data()));
    cs.noteWork();
    return true;
  }
  static constexpr int kGridPushBlocks = 128;

  // signaledCopy as one grid kernel (launchGridSignaledCopy); false: not
  // done (no arrivals word to be had under capture), do it otherwise.
  bool gridSignaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                        const uint32_t* wait_addr, uint32_t at_least, uint32_t* signal_addr,
                        uint32_t value, bool publish = true) {
    (void)semaphoreApi("signaledCopy", wait_addr);  // the same checks as waitValue
    (void)semaphoreApi("signaledCopy", signal_addr);
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, "signaledCopy");
    uint32_t* arrivals = arrivalsFor(cs);
    if (arrivals == nullptr) return false;
    if (!grid_wait_in_kernel_) {
      waitValue(s, wait_addr, at_least);
      wait_addr = nullptr;
    }
    HIR_CUDA_CHECK(ordinal_, launchGridSignaledCopy(cs.native(), dst, src, bytes, wait_addr,
                                                    at_least, signal_addr, value, arrivals,
                                                    gridBlocks(bytes), publish));
    cs.noteWork();
    return true;
  }

  // The word a grid copy on `cs` counts its blocks in. Outside a capture,
  // the stream's own (its kernels run one after another); under capture, a
  // word of its own for the captured kernel (a graph's replays never run
  // at the same time as each other, but may as the stream's later work),
  // or null when the words put aside by beginCapture ran out. Words are
  // never given twice: slabs of zeroed device memory that live until the
  // device goes.
  uint32_t* arrivalsFor(CudaStream& cs) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    HIR_CUDA_CHECK(ordinal_, cudaStreamIsCapturing(cs.native(), &capture));
    const bool captured = capture != cudaStreamCaptureStatusNone;
    if (!captured && cs.grid_arrivals != nullptr) return cs.grid_arrivals;
    std::lock_guard<std::mutex> lock(arrivals_mutex_);
    if (arrival_left_ == 0) {
      if (captured) return nullptr;  // no allocation during a capture
      addArrivalSlab();
    }
    uint32_t* word = arrival_next_++;
    --arrival_left_;
    if (!captured) cs.grid_arrivals = word;
    return word;
  }
  static constexpr std::size_t kArrivalSlabWords = 4096;
  // A new slab of zeroed words (allocate() zeroes and tracks it). Caller
  // holds arrivals_mutex_.
  void addArrivalSlab() {
    arrival_next_ = static_cast<uint32_t*>(allocate(kArrivalSlabWords * sizeof(uint32_t)));
    arrival_left_ = kArrivalSlabWords;
  }
  std::mutex arrivals_mutex_;
  uint32_t* arrival_next_ = nullptr;
  std::size_t arrival_left_ = 0;
  bool kernel_semaphores_ = false;   // HIR_CUDA_SEMAPHORES
  // waitValue / writeValue as one kernel (kernelSemaphores()).
  void semaphoreKernel(Stream& s, const char* call, const uint32_t* wait_addr, uint32_t at_least,
                       uint32_t* signal_addr, uint32_t value) {
    activate(ordinal_);
    CudaStream& cs = cudaStream(s, call);
    HIR_CUDA_CHECK(ordinal_, launchSignaledCopy(cs.native(), nullptr, nullptr, 0, wait_addr,
                                                at_least, signal_addr, value));
    cs.noteWork();
  }
  bool fusable(const MessageStep& step) const {
    auto small = [&](const MessageStep::Copy& c) { return c.bytes <= kernel_copy_max_; };
    return std::all_of(step.pushes.begin(), step.pushes.begin() + step.push_count, small) &&
           std::all_of(step.pulls.begin(), step.pulls.begin() + step.pull_count, small);
  }
  CudaStream::Counter default_counter_ = newCounter();  // shared with wrapStream(nullptr)
  std::unique_ptr<CudaStream> default_stream_;
  cudaStream_t zero_stream_ = nullptr;  // zeroes new allocations
  std::unique_ptr<Cublas> blas_;        // the matmul's cuBLAS handle
  std::unique_ptr<KernelStampRing> stamps_;  // HIR_CUDA_STAMPS, null when off
  const KernelStampSink* stampSink() const {
    return stamps_ != nullptr ? &stamps_->sink() : nullptr;
  }
  std::shared_ptr<StickyError> sticky_ = std::make_shared<StickyError>();
  std::atomic<bool> cancelled_{false};
  // Between beginCapture and endCapture (one thread captures: thread-local
  // mode), and the host functions launched meanwhile, which the graph keeps.
  bool capturing_ = false;
  std::vector<std::unique_ptr<HostTask>> captured_tasks_;

  std::mutex mutex_;  // guards the maps below and the zeroing stream
  std::unordered_map<void*, std::size_t> allocations_;
  std::map<uintptr_t, CheckBlock> check_blocks_;  // by host address
  std::unordered_map<void*, int> imports_;        // imported pointer -> opens
};

}  // namespace

int deviceOrdinal(const Device& d) {
  auto* cd = dynamic_cast<const CudaDevice*>(&d);
  HIR_INTERNAL_ASSERT(cd != nullptr, "expected a cuda device, got '{}'", d.kind());
  return cd->ordinal();
}

void testSpin(Stream& s, double ms) {
  CudaStream& cs = cudaStream(s, "testSpin");
  activate(cs.ordinal());
  const auto ns = static_cast<uint64_t>(std::max(0.0, ms) * 1e6);
  HIR_CUDA_CHECK(cs.ordinal(), launchSpin(cs.native(), ns));
  cs.noteWork();
}

}  // namespace hir::cuda

namespace hir {

namespace {

bool cudaAvailable(std::string* why) { return cudaVisibleGpuCount(why) > 0; }

}  // namespace

int cudaVisibleGpuCount(std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (why)
      *why = fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(err),
                         cudaGetErrorName(err));
    return 0;
  }
  if (count < 1 && why) *why = "no CUDA GPU is visible (cudaGetDeviceCount returned 0)";
  return count < 1 ? 0 : count;
}

void registerCudaDevice() {
  registerDevice(DeviceInfo{
      "cuda", cudaAvailable,
      [](int index, const Settings&) -> std::unique_ptr<Device> {
        return std::make_unique<cuda::CudaDevice>(index);
      }});
}

}  // namespace hir
