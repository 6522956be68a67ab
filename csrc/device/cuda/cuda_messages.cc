// The CUDA device's steps of ipc's message protocol (device.h): stream
// semaphores (writeValue, waitValue), signaled copies, counted steps,
// message steps and reduce with a MessageStep, each as a kernel where it
// can (cuda_kernels.h), and the settings from the environment that choose
// between a kernel of one block, a grid kernel and a copy engine.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "common/check.h"
#include "device/compute.h"
#include "device/cuda_interop.h"
#include "device/cuda/cuda_device_impl.h"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda/driver_api.h"

#include <hostir/device.h>

namespace hir::cuda {

// --------------------------------------------------------------- settings

// Copies up to HIR_CUDA_KERNEL_COPY_MAX bytes run as a kernel rather than on
// a copy engine: a kernel starts sooner, which is what small messages (ipc)
// wait for (0: always the copy engine).
std::size_t kernelCopyMax(const Settings& settings) {
  return static_cast<std::size_t>(settings.get(Setting::CudaKernelCopyMax));
}

// HIR_CUDA_GRID_COPY_WAIT: "kernel" (default): each block of a grid
// signaled copy waits in the kernel, which then starts copying as soon as
// the flag is set; "stream": a stream wait before the kernel, so that no
// block is resident while it waits, at the cost of a kernel launch after
// the wait (docs/ipc.md, "Mid-size copies: one grid kernel", compares
// them).
bool gridCopyWaitsInKernel(const Settings& settings) {
  return settings.text(Setting::CudaGridCopyWait) == "kernel";
}

// Signaled copies above HIR_CUDA_KERNEL_COPY_MAX and up to
// HIR_CUDA_GRID_COPY_MAX bytes (0: none) run as one kernel of a grid of
// blocks instead of a stream wait, a copy engine's copy and a stream
// write. Each block copies about kGridCopyBlockBytes, and a grid has at
// most HIR_CUDA_GRID_COPY_BLOCKS blocks: few enough that the grids of
// every lane of a rank of 8, waiting at once, hold well under the GPU's
// resident blocks. docs/ipc.md, "Mid-size copies: one grid kernel", has
// the measurements behind the defaults.
constexpr std::size_t kGridCopyBlockBytes = 32 * 1024;

std::size_t gridCopyMax(const Settings& settings) {
  return static_cast<std::size_t>(settings.get(Setting::CudaGridCopyMax));
}

int gridCopyBlocks(const Settings& settings) {
  return static_cast<int>(settings.get(Setting::CudaGridCopyBlocks));
}

// HIR_CUDA_SEMAPHORES: how waitValue and writeValue run. "memop" (default):
// the driver's stream memory operations (cuStreamWaitValue32 /
// cuStreamWriteValue32), which hold no SM while they wait; "kernel": a
// one-block kernel whose thread 0 polls the word, or releases the value, at
// system scope (what the fused signaled copies and the counted steps do
// already). docs/ipc.md, "Kernel semaphores", compares the two.
bool kernelSemaphores(const Settings& settings) {
  return settings.text(Setting::CudaSemaphores) == "kernel";
}

// ------------------------------------------------------ stream semaphores

void CudaDevice::writeValue(Stream& s, uint32_t* addr, uint32_t value) {
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

void CudaDevice::waitValue(Stream& s, const uint32_t* addr, uint32_t at_least) {
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

const DriverApi& CudaDevice::semaphoreApi(const char* call, const void* addr) const {
  const DriverApi& api = driverApi();
  HIR_CHECK_AS(BackendError, api.hasStreamMemOps(),
               "cuda: {} needs the stream memory operations, not available on device {}: {}",
               call, ordinal_, api.missing);
  HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(addr) % alignof(uint32_t) == 0,
                      "cuda {}: semaphore address {} is not 4-byte aligned", call, addr);
  return api;
}

// waitValue / writeValue as one kernel (kernelSemaphores()).
void CudaDevice::semaphoreKernel(Stream& s, const char* call, const uint32_t* wait_addr,
                                 uint32_t at_least, uint32_t* signal_addr, uint32_t value) {
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, call);
  HIR_CUDA_CHECK(ordinal_, launchSignaledCopy(cs.native(), nullptr, nullptr, 0, wait_addr,
                                              at_least, signal_addr, value));
  cs.noteWork();
}

// ----------------------------------------------------------------- copies

// Small copies (and none, with kernel semaphores): one kernel that waits,
// copies and signals (a stream wait and a stream write each add a
// dependent step before and after the copy kernel). Larger ones up to
// HIR_CUDA_GRID_COPY_MAX: the same as one kernel of a grid
// (gridSignaledCopy). Larger still: the three steps, the copy on a copy
// engine.
void CudaDevice::signaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                              const uint32_t* wait_addr, uint32_t at_least, uint32_t* signal_addr,
                              uint32_t value) {
  if (bytes > kernel_copy_max_ && bytes <= grid_copy_max_ && wait_addr != nullptr &&
      signal_addr != nullptr && gridSignaledCopy(s, dst, src, bytes, wait_addr, at_least,
                                                 signal_addr, value))
    return;
  if ((bytes == 0 && !kernel_semaphores_) || bytes > kernel_copy_max_)
    return DeviceMessages::signaledCopy(s, dst, src, bytes, wait_addr, at_least, signal_addr,
                                        value);
  (void)semaphoreApi("signaledCopy", wait_addr);  // the same checks as waitValue
  (void)semaphoreApi("signaledCopy", signal_addr);
  activate(ordinal_);
  CudaStream& cs = cudaStream(s, "signaledCopy");
  HIR_CUDA_CHECK(ordinal_, launchSignaledCopy(cs.native(), dst, src, bytes, wait_addr, at_least,
                                              signal_addr, value));
  cs.noteWork();
}

// signaledCopy as one grid kernel (launchGridSignaledCopy); false: not
// done (no arrivals word to be had under capture), do it otherwise.
bool CudaDevice::gridSignaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                                  const uint32_t* wait_addr, uint32_t at_least,
                                  uint32_t* signal_addr, uint32_t value, bool publish) {
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

// Kernels, so that a graph's replays count on (a stream memory
// operation's value is fixed when it is enqueued). Copies larger than
// HIR_CUDA_KERNEL_COPY_MAX: up to HIR_CUDA_GRID_COPY_MAX one grid kernel
// (its blocks wait, whatever HIR_CUDA_GRID_COPY_WAIT says: the number is
// known only on the device), above to a copy engine between two kernels;
// the last kernel advances the counter.
void CudaDevice::countedStep(Stream& s, const CountedStep& st) {
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

// Blocks of a grid copy of `bytes`.
int CudaDevice::gridBlocks(std::size_t bytes) const {
  return static_cast<int>(std::clamp<std::size_t>(
      (bytes + kGridCopyBlockBytes - 1) / kGridCopyBlockBytes, 2,
      static_cast<std::size_t>(grid_copy_blocks_)));
}

// The word a grid copy on `cs` counts its blocks in. Outside a capture,
// the stream's own (its kernels run one after another); under capture, a
// word of its own for the captured kernel (a graph's replays never run
// at the same time as each other, but may as the stream's later work),
// or null when the words put aside by beginCapture ran out. Words are
// never given twice: slabs of zeroed device memory that live until the
// device goes.
uint32_t* CudaDevice::arrivalsFor(CudaStream& cs) {
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

// A new slab of zeroed words (allocate() zeroes and tracks it). Caller
// holds arrivals_mutex_.
void CudaDevice::addArrivalSlab() {
  arrival_next_ = static_cast<uint32_t*>(allocate(kArrivalSlabWords * sizeof(uint32_t)));
  arrival_left_ = kArrivalSlabWords;
}

// ---------------------------------------------------------- message steps

// Several parts, each at most HIR_CUDA_KERNEL_COPY_MAX, or one with
// direct delivery (device.h): one kernel of one block (the block copies
// each). One part, or a larger one: each as its own counted step or
// signaled copy (Device's default: a kernel with fewer arguments, or a
// copy engine, which moves every message through its slot), but a part
// in lines, which only the one-block kernel reads and writes: a kernel of
// its own, in its turn.
void CudaDevice::messageStep(Stream& s, const MessageStep& step) {
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
    return DeviceMessages::messageStep(s, step);
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

// Every part at most HIR_CUDA_KERNEL_COPY_MAX: the one-block kernels take
// the step.
bool CudaDevice::fusable(const MessageStep& step) const {
  auto small = [&](const MessageStep::Copy& c) { return c.bytes <= kernel_copy_max_; };
  return std::all_of(step.pushes.begin(), step.pushes.begin() + step.push_count, small) &&
         std::all_of(step.pulls.begin(), step.pulls.begin() + step.pull_count, small);
}

// A pull (a copy out of this rank's own slot, whose signal says only
// that the slot was read) above HIR_CUDA_KERNEL_COPY_MAX, up to
// HIR_CUDA_GRID_COPY_MAX: the grid kernel of a signaled copy or a
// counted step without the fences that publish a push's data (`publish`
// false). False: not done (another size, or no word under capture).
bool CudaDevice::gridPull(Stream& s, const MessageStep& step) {
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
bool CudaDevice::gridPushes(Stream& s, const MessageStep& step) {
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

// ----------------------------------------------------------------- reduce

void CudaDevice::reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
                        ReduceOp op, std::size_t count) {
  reduceWith(s, dst, srcs, sources, t, op, count, nullptr);
}

void CudaDevice::reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
                        ReduceOp op, std::size_t count, const MessageStep& sync) {
  reduceWith(s, dst, srcs, sources, t, op, count, &sync);
}

void CudaDevice::reduceWith(Stream& s, void* dst, const void* const* srcs, std::size_t sources,
                            DType t, ReduceOp op, std::size_t count, const MessageStep* sync) {
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

}  // namespace hir::cuda
