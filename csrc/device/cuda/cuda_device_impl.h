// The CUDA device's class (CudaDevice), private to device/cuda/. Its
// members are defined in cuda_device.cc (creation, streams, events, data
// kernels, graphs, compute, timing), cuda_device_memory.cc (memory, check
// records, IPC handles) and cuda_messages.cc (ipc's message protocol:
// stream semaphores, signaled copies, counted steps, message steps and
// reduce, with the settings they read). cuda_device.h says how it behaves.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/check.h"
#include "device/cuda_interop.h"
#include "device/messages.h"
#include "device/cuda/cuda_compute.h"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda/driver_api.h"
#include "device/cuda/kernel_stamps.h"

#include <hostir/device.h>
#include <hostir/settings.h>

namespace hir::cuda {

// How long allocate() waits for its zeroing, and the destructor for the
// default stream before it frees what was left allocated.
constexpr Duration kHousekeepingTimeout = std::chrono::seconds(60);

// The message protocol's settings from the environment, read when the
// device is created (defined, with what each means, in cuda_messages.cc).
std::size_t kernelCopyMax(const Settings& settings);
bool gridCopyWaitsInKernel(const Settings& settings);
std::size_t gridCopyMax(const Settings& settings);
int gridCopyBlocks(const Settings& settings);
bool kernelSemaphores(const Settings& settings);

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

// It runs ipc's message protocol itself (DeviceMessages, cuda_messages.cc).
class CudaDevice final : public Device, public DeviceMessages {
 public:
  CudaDevice(int index, const Settings& settings);
  ~CudaDevice() override;

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int ordinal() const { return ordinal_; }

  std::string_view kind() const override { return "cuda"; }
  std::string describe() const override { return fmt::format("cuda:{} ({})", ordinal_, name_); }
  bool supports(DeviceFeature f) const override;

  // --------------------------------------------------------------- memory
  // (cuda_device_memory.cc)

  void* allocate(std::size_t bytes) override;
  std::string outOfMemory(std::size_t size) const;
  void deallocate(void* p) override;
  CheckRecord* allocateCheckRecords(std::size_t n) override;
  void freeCheckRecords(CheckRecord* p) override;

  // -------------------------------------------------------------- streams

  Stream& defaultStream() override { return *default_stream_; }
  std::unique_ptr<Stream> createStream() override;
  std::unique_ptr<Stream> wrapStream(void* native) override;

  // --------------------------------------------------------------- events

  std::unique_ptr<Event> createEvent() override;
  void record(Event& e, Stream& s) override;
  void wait(Stream& s, Event& e) override;
  bool query(Event& e) override;
  void synchronize(Event& e, Duration timeout) override;
  void cancel(std::string_view why) override;
  void synchronize(Stream& s, Duration timeout) override;

  // --------------------------------------------------------- data kernels

  void fill(Stream& s, void* dst, DType t, std::size_t count, int64_t value,
            int64_t step) override;
  void copy(Stream& s, void* dst, const void* src, std::size_t bytes) override;
  void check(Stream& s, const void* src, DType t, std::size_t count, int64_t value, int64_t step,
             Tolerance tolerance, CheckRecord* out, int64_t execution) override;
  void launchHostFunc(Stream& s, std::function<void()> fn) override;

  // --------------------------------------------------------------- graphs

  void beginCapture(Stream& s) override;
  std::unique_ptr<Graph> endCapture(Stream& s) override;
  void launchGraph(Graph& g, Stream& s) override;

  // -------------------------------------------------------------- compute

  void matmul(Stream& s, const MatmulArgs& args) override;
  void add(Stream& s, void* out, const void* a, const void* b, DType t,
           std::size_t count) override;
  void unary(Stream& s, const UnaryArgs& args) override;
  void fillRandom(Stream& s, void* dst, DType t, std::size_t count,
                  const RandomPattern& pattern) override;
  void checkAgainst(Stream& s, const void* got, DType t, const void* expected, DType et,
                    std::size_t count, Tolerance tolerance, CheckRecord* out,
                    int64_t execution) override;
  void* nativeStream(Stream& s) override;

  // --------------------------------------------------------------- timing

  std::unique_ptr<Event> createTimingEvent() override;
  double elapsedMs(Event& from, Event& to) override;

  // ------------------------------------------------------------------ IPC
  // (cuda_device_memory.cc)

  MemoryHandle exportMemory(void* p) override;
  void* importMemory(const MemoryHandle& h) override;
  void closeImported(void* p) override;

  // ----------------------------------------------------- message protocol
  // (cuda_messages.cc)

  void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
              ReduceOp op, std::size_t count) override;
  void writeValue(Stream& s, uint32_t* addr, uint32_t value) override;
  void waitValue(Stream& s, const uint32_t* addr, uint32_t at_least) override;
  DeviceMessages* messages() override { return this; }
  bool supportsCounted() const override { return true; }
  void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
              ReduceOp op, std::size_t count, const MessageStep& sync) override;
  void messageStep(Stream& s, const MessageStep& step) override;
  // Parts in lines run in the one-block kernels, which take parts up to
  // HIR_CUDA_KERNEL_COPY_MAX.
  std::size_t inlineFlagsMax() const override { return kernel_copy_max_; }
  void signaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                    const uint32_t* wait_addr, uint32_t at_least, uint32_t* signal_addr,
                    uint32_t value) override;
  void countedStep(Stream& s, const CountedStep& st) override;

 private:
  struct CheckBlock {
    std::size_t bytes = 0;
    void* device = nullptr;  // device view of the block's start
  };

  // cuda_device.cc
  bool drain(cudaStream_t s, Duration timeout);
  void throwIfSticky();
  void releaseHousekeeping();
  static CudaStream::Counter newCounter() { return std::make_shared<std::atomic<uint64_t>>(0); }
  const KernelStampSink* stampSink() const {
    return stamps_ != nullptr ? &stamps_->sink() : nullptr;
  }

  // cuda_device_memory.cc
  CheckRecord* devicePointerOf(CheckRecord* host);

  // cuda_messages.cc
  void reduceWith(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
                  ReduceOp op, std::size_t count, const MessageStep* sync);
  const DriverApi& semaphoreApi(const char* call, const void* addr) const;
  int gridBlocks(std::size_t bytes) const;
  bool gridPull(Stream& s, const MessageStep& step);
  bool gridPushes(Stream& s, const MessageStep& step);
  bool gridSignaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                        const uint32_t* wait_addr, uint32_t at_least, uint32_t* signal_addr,
                        uint32_t value, bool publish = true);
  uint32_t* arrivalsFor(CudaStream& cs);
  void addArrivalSlab();
  void semaphoreKernel(Stream& s, const char* call, const uint32_t* wait_addr, uint32_t at_least,
                       uint32_t* signal_addr, uint32_t value);
  bool fusable(const MessageStep& step) const;

  int ordinal_ = 0;
  std::string name_;
  int max_blocks_ = 1;
  std::size_t kernel_copy_max_ = 0;  // copies up to this size run as a kernel
  std::size_t grid_copy_max_ = 0;    // signaled copies up to this size: a grid kernel
  bool grid_wait_in_kernel_ = true;  // HIR_CUDA_GRID_COPY_WAIT
  bool pull_fence_ = false;          // HIR_CUDA_PULL_FENCE (an experiment's A/B)
  int grid_copy_blocks_ = 2;          // HIR_CUDA_GRID_COPY_BLOCKS
  static constexpr int kGridPushBlocks = 128;  // gridPushes' blocks in all
  static constexpr std::size_t kArrivalSlabWords = 4096;  // arrivalsFor's words per slab
  std::mutex arrivals_mutex_;
  uint32_t* arrival_next_ = nullptr;
  std::size_t arrival_left_ = 0;
  bool kernel_semaphores_ = false;   // HIR_CUDA_SEMAPHORES
  CudaStream::Counter default_counter_ = newCounter();  // shared with wrapStream(nullptr)
  std::unique_ptr<CudaStream> default_stream_;
  cudaStream_t zero_stream_ = nullptr;  // zeroes new allocations
  std::unique_ptr<Cublas> blas_;        // the matmul's cuBLAS handle
  std::unique_ptr<KernelStampRing> stamps_;  // HIR_CUDA_STAMPS, null when off
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

}  // namespace hir::cuda
