// The CUDA device: its creation and teardown, streams, events, data
// kernels, graphs, compute and timing. cuda_device.h says how it behaves
// and cuda_device_impl.h declares its class, whose memory is in
// cuda_device_memory.cc and whose steps of ipc's message protocol are in
// cuda_messages.cc; cuda_interop.h is what other GPU code may use of it
// (cuda_interop.cc). Its kernels are in the cuda_*_kernels.cu files
// (cuda_kernels.h), cuBLAS in cuda_compute.cc, driver entry points in
// driver_api.cc.
#include "device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "common/check.h"
#include "common/log.h"
#include "device/compute.h"
#include "device/cuda_interop.h"
#include "device/cuda/cuda_compute.h"
#include "device/cuda/cuda_device_impl.h"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda/kernel_stamps.h"
#include "device/cuda/test_kernels.h"

namespace hir::cuda {

namespace {

// After cancel(): the backends' abort released what the GPU waited on
// (ncclCommAbort, ipc's abort flag), so what is left drains in moments; a
// device that still does not is left to the process exit rather than
// holding the rank past its timeout (docs/cli.md, "Timeouts").
constexpr Duration kCancelledDrainTimeout = std::chrono::seconds(2);

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

}  // namespace

// ------------------------------------------------------------- the device

CudaDevice::CudaDevice(int index, const Settings& settings)
    : DeviceMessages(static_cast<Device&>(*this)) {
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
  kernel_copy_max_ = kernelCopyMax(settings);
  grid_copy_max_ = gridCopyMax(settings);
  grid_wait_in_kernel_ = gridCopyWaitsInKernel(settings);
  pull_fence_ = settings.on(Setting::CudaPullFence);
  grid_copy_blocks_ = gridCopyBlocks(settings);
  kernel_semaphores_ = kernelSemaphores(settings);
  // Programmatic dependent launch exists from compute capability 9.0.
  setProgrammaticLaunch(settings.on(Setting::CudaPdl) && props.major >= 9);
  setSpreadSources(settings.on(Setting::CudaSpreadSources));
  setPushesAtOnce(settings.on(Setting::CudaPushesAtOnce));
  HIR_CUDA_CHECK(ordinal_, preloadKernels());
  stamps_ = KernelStampRing::create(settings.text(Setting::CudaStamps), ordinal_);
  cudaStream_t s = nullptr;
  HIR_CUDA_CHECK(ordinal_, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  default_stream_ = std::make_unique<CudaStream>(s, ordinal_, /*owned=*/true, default_counter_);
  HIR_CUDA_CHECK(ordinal_, cudaStreamCreateWithFlags(&zero_stream_, cudaStreamNonBlocking));
}

CudaDevice::~CudaDevice() {
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

bool CudaDevice::supports(DeviceFeature f) const {
  switch (f) {
    case DeviceFeature::Ipc: return true;
    case DeviceFeature::StreamSemaphore: return driverApi().hasStreamMemOps();
    case DeviceFeature::Compute: return true;
    case DeviceFeature::Timing: return true;
    case DeviceFeature::Graphs: return true;
    case DeviceFeature::Reduce: return true;
  }
  return false;
}

// ---------------------------------------------------------------- streams

std::unique_ptr<Stream> CudaDevice::createStream() {
  activate(ordinal_);
  cudaStream_t s = nullptr;
  HIR_CUDA_CHECK(ordinal_, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return std::make_unique<CudaStream>(s, ordinal_, /*owned=*/true, newCounter());
}

std::unique_ptr<Stream> CudaDevice::wrapStream(void* native) {
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

// ----------------------------------------------------------------- events

std::unique_ptr<Event> CudaDevice::createEvent() {
  activate(ordinal_);
  cudaEvent_t e = nullptr;
  HIR_CUDA_CHECK(ordinal_, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return std::make_unique<CudaEvent>(e, ordinal_);
}

void CudaDevice::record(Event& e, Stream& s) {
  activate(ordinal_);
  HIR_CUDA_CHECK(ordinal_,
                 cudaEventRecord(nativeEvent(e, "record"), cuda::nativeStream(s, "record")));
}

void CudaDevice::wait(Stream& s, Event& e) {
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "wait");
  HIR_CUDA_CHECK(ordinal_, cudaStreamWaitEvent(cs.native(), nativeEvent(e, "wait"), 0));
  cs.noteWork();
}

bool CudaDevice::query(Event& e) {
  throwIfSticky();
  activate(ordinal_);
  cudaError_t err = cudaEventQuery(nativeEvent(e, "query"));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  throwCudaError(err, "cudaEventQuery", ordinal_);
}

void CudaDevice::synchronize(Event& e, Duration timeout) {
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
void CudaDevice::cancel(std::string_view why) {
  HIR_LOG_INFO(Subsys::Cuda, "queued work cancelled: {}", why);
  sticky_->set(std::string(why));
  cancelled_ = true;
}

void CudaDevice::synchronize(Stream& s, Duration timeout) {
  throwIfSticky();
  activate(ordinal_);
  HIR_CHECK_AS(TimeoutError, drain(cuda::nativeStream(s, "synchronize"), timeout),
               "cuda: a stream on device {} did not drain within {} ms", ordinal_,
               timeout.count());
  throwIfSticky();
}

// ----------------------------------------------------------- data kernels

void CudaDevice::fill(Stream& s, void* dst, DType t, std::size_t count, int64_t value,
                      int64_t step) {
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "fill");
  HIR_CUDA_CHECK(ordinal_, launchFill(cs.native(), dst, t, count, value, step, max_blocks_));
  cs.noteWork();
}

void CudaDevice::copy(Stream& s, void* dst, const void* src, std::size_t bytes) {
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

void CudaDevice::check(Stream& s, const void* src, DType t, std::size_t count, int64_t value,
                       int64_t step, Tolerance tolerance, CheckRecord* out, int64_t execution) {
  activate(ordinal_);
  CheckRecord* device_record = devicePointerOf(out);
  CudaStream& cs = cudaStream(s, "check");
  HIR_CUDA_CHECK(ordinal_, launchCheck(cs.native(), src, t, count, value, step, tolerance,
                                       device_record, execution, max_blocks_));
  cs.noteWork();
}

void CudaDevice::launchHostFunc(Stream& s, std::function<void()> fn) {
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

// ----------------------------------------------------------------- graphs

void CudaDevice::beginCapture(Stream& s) {
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

std::unique_ptr<Graph> CudaDevice::endCapture(Stream& s) {
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

void CudaDevice::launchGraph(Graph& g, Stream& s) {
  auto* graph = dynamic_cast<CudaGraph*>(&g);
  HIR_INTERNAL_ASSERT(graph != nullptr, "cuda: launchGraph of a graph of another device");
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "launchGraph");
  HIR_CUDA_CHECK(ordinal_, cudaGraphLaunch(graph->exec(), cs.native()));
  cs.noteWork();
}

// ---------------------------------------------------------------- compute

void CudaDevice::matmul(Stream& s, const MatmulArgs& args) {
  checkMatmulArgs(args, "cuda");
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "matmul");
  blas_->matmul(cs.native(), args);
  cs.noteWork();
}

void CudaDevice::add(Stream& s, void* out, const void* a, const void* b, DType t,
                     std::size_t count) {
  if (count == 0) return;
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "add");
  HIR_CUDA_CHECK(ordinal_, launchAdd(cs.native(), out, a, b, t, count, max_blocks_));
  cs.noteWork();
}

void CudaDevice::unary(Stream& s, const UnaryArgs& args) {
  HIR_INTERNAL_ASSERT(args.op == UnaryOp::Cast ||
                          (args.in_type == args.out_type && isFloating(args.in_type)),
                      "cuda unary {}: {} to {} (a floating dtype to itself expected)",
                      static_cast<int>(args.op), toString(args.in_type), toString(args.out_type));
  if (args.count == 0) return;
  HIR_INTERNAL_ASSERT(args.in != nullptr && args.out != nullptr,
                      "cuda unary of {} elements with a null buffer", args.count);
  // In place, each thread reads and writes its own element only when both
  // have one size; else it would overwrite what another thread still reads.
  HIR_INTERNAL_ASSERT(args.in != args.out || dtypeSize(args.in_type) == dtypeSize(args.out_type),
                      "cuda unary in place from {} to {}: the dtypes differ in size",
                      toString(args.in_type), toString(args.out_type));
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "unary");
  HIR_CUDA_CHECK(ordinal_, launchUnary(cs.native(), args, max_blocks_));
  cs.noteWork();
}

void CudaDevice::fillRandom(Stream& s, void* dst, DType t, std::size_t count,
                            const RandomPattern& pattern) {
  checkRandomPattern(t, pattern, "cuda");
  if (count == 0) return;
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "fillRandom");
  HIR_CUDA_CHECK(ordinal_, launchFillRandom(cs.native(), dst, t, count, pattern, max_blocks_));
  cs.noteWork();
}

void CudaDevice::checkAgainst(Stream& s, const void* got, DType t, const void* expected, DType et,
                              std::size_t count, Tolerance tolerance, CheckRecord* out,
                              int64_t execution) {
  HIR_INTERNAL_ASSERT(out != nullptr, "check without a record");
  if (count == 0) return;
  activate(ordinal_);
  CheckRecord* device_record = devicePointerOf(out);
  CudaStream& cs = cudaStream(s, "checkAgainst");
  HIR_CUDA_CHECK(ordinal_, launchCheckAgainst(cs.native(), got, t, expected, et, count, tolerance,
                                              device_record, execution, max_blocks_));
  cs.noteWork();
}

// The caller enqueues on it behind the device's back (an embedder's
// kernel): counted as work, so that no backend skips a wait for it.
void* CudaDevice::nativeStream(Stream& s) {
  CudaStream& cs = cudaStream(s, "nativeStream");
  cs.noteWork();
  return cs.native();
}

// ----------------------------------------------------------------- timing

std::unique_ptr<Event> CudaDevice::createTimingEvent() {
  activate(ordinal_);
  cudaEvent_t e = nullptr;
  HIR_CUDA_CHECK(ordinal_, cudaEventCreateWithFlags(&e, cudaEventDefault));
  return std::make_unique<CudaEvent>(e, ordinal_);
}

double CudaDevice::elapsedMs(Event& from, Event& to) {
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

// ----------------------------------------------------------- housekeeping

// Waits for the work enqueued so far on `s`; false on timeout.
bool CudaDevice::drain(cudaStream_t s, Duration timeout) {
  cudaEvent_t e = nullptr;
  HIR_CUDA_CHECK(ordinal_, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  struct Destroy {
    cudaEvent_t e;
    ~Destroy() { (void)cudaEventDestroy(e); }
  } destroy{e};
  HIR_CUDA_CHECK(ordinal_, cudaEventRecord(e, s));
  return pollEvent(e, timeout, ordinal_);
}

void CudaDevice::throwIfSticky() {
  std::string message = sticky_->get();
  if (!message.empty()) throw BackendError(message);
}

void CudaDevice::releaseHousekeeping() {
  if (zero_stream_) (void)cudaStreamDestroy(zero_stream_);
  zero_stream_ = nullptr;
}

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
      [](int index, const Settings& settings) -> std::unique_ptr<Device> {
        return std::make_unique<cuda::CudaDevice>(index, settings);
      },
      /*graphs=*/true});
}

}  // namespace hir
