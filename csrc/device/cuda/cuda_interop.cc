// What cuda_interop.h offers GPU-only code: the native handles' wrappers,
// the current device, CUDA error checking and bounded event polls.
#include "device/cuda_interop.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "common/check.h"

namespace hir::cuda {

namespace {

using Clock = std::chrono::steady_clock;

// "cudaMalloc(&p, n)" -> "cudaMalloc".
std::string_view functionName(const char* call) {
  std::string_view text(call);
  std::size_t paren = text.find('(');
  return paren == std::string_view::npos ? text : text.substr(0, paren);
}

}  // namespace

void activateQuietly(int ordinal) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != ordinal) (void)cudaSetDevice(ordinal);
  (void)cudaGetLastError();
}

CudaStream::~CudaStream() {
  if (!owned_) return;
  activateQuietly(ordinal_);
  (void)cudaStreamDestroy(native_);
  (void)cudaGetLastError();
}

CudaEvent::~CudaEvent() {
  activateQuietly(ordinal_);
  (void)cudaEventDestroy(native_);
  (void)cudaGetLastError();
}

CudaStream& cudaStream(Stream& s, const char* what) {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  HIR_INTERNAL_ASSERT(cs != nullptr, "{}: the stream does not belong to a cuda device", what);
  return *cs;
}

cudaStream_t nativeStream(Stream& s, const char* what) { return cudaStream(s, what).native(); }

cudaEvent_t nativeEvent(Event& e, const char* what) {
  auto* ce = dynamic_cast<CudaEvent*>(&e);
  HIR_INTERNAL_ASSERT(ce != nullptr, "{}: the event does not belong to a cuda device", what);
  return ce->native();
}

void activate(int ordinal) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal) return;
  HIR_CUDA_CHECK(ordinal, cudaSetDevice(ordinal));
}

void throwCudaError(cudaError_t err, const char* call, int ordinal) {
  // Clears the error if it is not sticky, so it does not resurface later.
  (void)cudaGetLastError();
  throw BackendError(fmt::format("cuda: {} failed on device {}: {} ({})", functionName(call),
                                 ordinal, cudaGetErrorString(err), cudaGetErrorName(err)));
}

// The pause after the yielding: 20 us at least, a 256th of the wait, at
// most 1 ms (a wait of 10 ms pauses 39 us; from 256 ms, 1 ms).
static_assert(pollPause(std::chrono::microseconds{0}) == std::chrono::microseconds{20});
static_assert(pollPause(kPollYield) == std::chrono::microseconds{39});
static_assert(pollPause(std::chrono::milliseconds{100}) == std::chrono::microseconds{390});
static_assert(pollPause(std::chrono::seconds{1}) == std::chrono::microseconds{1000});

bool pollEvent(cudaEvent_t event, Duration timeout, int ordinal) {
  using std::chrono::microseconds;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  for (;;) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return true;
    if (err != cudaErrorNotReady) throwCudaError(err, "cudaEventQuery", ordinal);
    const auto now = Clock::now();
    if (now >= deadline) return false;
    const auto waited = std::chrono::duration_cast<microseconds>(now - start);
    if (waited < kPollSpin) continue;
    if (waited < kPollYield) {
      std::this_thread::yield();
      continue;
    }
    const auto left = std::chrono::duration_cast<microseconds>(deadline - now);
    std::this_thread::sleep_for(std::min(pollPause(waited), left));
  }
}

}  // namespace hir::cuda
