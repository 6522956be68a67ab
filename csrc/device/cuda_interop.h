// What the cuda device offers GPU-only code that runs on it (the NCCL
// backend, the GPU tests, the benchmarks): the native handles behind Stream
// and Event, the device ordinal behind a Device, the work counter of a
// tracked stream, and CUDA error checking. The device's own implementation
// stays in device/cuda/, private to device/; what is declared here is
// implemented in device/cuda/cuda_interop.cc (deviceOrdinal, which needs the
// device's class, in cuda_device.cc). Includes the CUDA runtime headers, so
// only GPU-only code includes it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include <hostir/device.h>

namespace hir::cuda {

// A CUDA stream; owned streams are destroyed with the wrapper.
//
// Work counter: every call of CudaDevice that enqueues work or a dependency
// on the stream (fill, copy, check, launchHostFunc, wait, writeValue,
// waitValue) increments it; record() does not. A backend may use it to see
// that nothing reached a stream since it last captured the stream's work, and
// skip a redundant event record + wait (see NcclBackend::post). This only
// holds for "tracked" streams: hostir's own (defaultStream(), createStream(),
// wrapStream(nullptr), which shares the default stream's counter). A wrapped
// caller stream is untracked: its owner enqueues work hostir never sees.
// Code that enqueues on a tracked stream's native handle without CudaDevice
// must call noteWork().
class CudaStream final : public Stream {
 public:
  using Counter = std::shared_ptr<std::atomic<uint64_t>>;

  CudaStream(cudaStream_t native, int ordinal, bool owned, Counter work)
      : native_(native), ordinal_(ordinal), owned_(owned), work_(std::move(work)) {}
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t native() const { return native_; }
  int ordinal() const { return ordinal_; }

  bool tracked() const { return work_ != nullptr; }
  // Identity of the counter (shared by the wrappers of one stream); null when
  // untracked.
  const void* counterId() const { return work_.get(); }
  uint64_t work() const { return work_ ? work_->load(std::memory_order_relaxed) : 0; }
  void noteWork() {
    if (work_) work_->fetch_add(1, std::memory_order_relaxed);
  }

  // A word of device memory that the cuda device's grid signaled copies on
  // this stream count their blocks in (launchGridSignaledCopy), given on
  // the first such copy and never to another stream; null until then.
  uint32_t* grid_arrivals = nullptr;

 private:
  cudaStream_t native_;
  int ordinal_;
  bool owned_;
  Counter work_;  // null: untracked
};

// A CUDA event: created without timing (cheaper to record and wait on), or
// with timing by createTimingEvent().
class CudaEvent final : public Event {
 public:
  CudaEvent(cudaEvent_t native, int ordinal) : native_(native), ordinal_(ordinal) {}
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t native() const { return native_; }
  int ordinal() const { return ordinal_; }

 private:
  cudaEvent_t native_;
  int ordinal_;
};

// The native handles; an object of another device kind is a bug in hostir
// (InternalError naming `what`).
cudaStream_t nativeStream(Stream& s, const char* what);
CudaStream& cudaStream(Stream& s, const char* what);
cudaEvent_t nativeEvent(Event& e, const char* what);
// The CUDA device ordinal of a device of kind "cuda" (InternalError otherwise).
int deviceOrdinal(const Device& d);

// Makes `ordinal` the calling thread's current device, only calling
// cudaSetDevice when it is not already (cudaGetDevice is a cheap TLS read).
void activate(int ordinal);
// The same for destructors: never throws, ignores failures (after a sticky
// error every call fails, and a destructor has nobody to report to).
void activateQuietly(int ordinal);

// Throws BackendError "cuda: <call> failed on device N: <text> (<name>)".
// `call` may be the full call text; only the function name is kept.
[[noreturn]] void throwCudaError(cudaError_t err, const char* call, int ordinal);

inline void cudaCheck(cudaError_t err, const char* call, int ordinal) {
  if (err != cudaSuccess) throwCudaError(err, call, ordinal);
}

// Polls `event` until it completes (true) or `timeout` runs out (false):
// spinning for the first kPollSpin, yielding up to kPollYield, then sleeping
// pollPause(waited) between looks, so that a wait ends within half a percent
// of the GPU's work at any length (and the kernel's timer slack), and a
// long one does not burn a core (docs/performance.md, sessions 26 and 27,
// measured the pauses tried). Throws BackendError when the event reports an
// error. Never calls cudaEventSynchronize, which cannot time out.
inline constexpr std::chrono::microseconds kPollSpin{50};
inline constexpr std::chrono::microseconds kPollYield{10'000};
// A 256th of the wait so far, 20 us to 1 ms.
constexpr std::chrono::microseconds pollPause(std::chrono::microseconds waited) {
  return std::clamp(waited / 256, std::chrono::microseconds{20}, std::chrono::microseconds{1000});
}
bool pollEvent(cudaEvent_t event, Duration timeout, int ordinal);

}  // namespace hir::cuda

// Checks a CUDA runtime call made for device `ordinal`.
#define HIR_CUDA_CHECK(ordinal, call) ::hir::cuda::cudaCheck((call), #call, (ordinal))
