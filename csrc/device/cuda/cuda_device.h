// The CUDA device ("cuda"): one GPU, picked by the local rank modulo the
// number of visible GPUs. This header stays free of CUDA headers; code that
// needs the native handles includes device/cuda_interop.h.
//
// Behaviour worth knowing (the rest is device.h):
// - defaultStream() is a stream created once with cudaStreamNonBlocking: it is
//   hostir's stream 0 when hostir is not embedded. wrapStream(nullptr) gives
//   that stream too; an embedder whose work is on the legacy default stream
//   passes cudaStreamLegacy (or cudaStreamPerThread) explicitly.
// - allocate() returns zeroed memory (so semaphores start at 0); zero bytes
//   give a unique 256-byte allocation. Too little free memory is a
//   RuntimeError with the bytes asked for and cudaMemGetInfo's free and
//   total bytes. Zeroing runs on a private stream that
//   the call waits for (allocation is never on the per-node path).
// - synchronize() polls with backoff and throws TimeoutError after the
//   timeout; it never blocks in cudaEventSynchronize.
// - check() may report any kMaxReported mismatches of the first failing
//   execution, not necessarily those with the smallest indices.
// - launchHostFunc(): an exception thrown by the function becomes the
//   device's sticky error (the next query/synchronize throws it). As with
//   cudaLaunchHostFunc, the function must not call CUDA.
// - IPC through cudaIpcGetMemHandle / cudaIpcOpenMemHandle; stream
//   semaphores through cuStreamWriteValue32 / cuStreamWaitValue32 (GEQ),
//   resolved with cudaGetDriverEntryPointByVersion (no libcuda link).
// - matmul() through cublasGemmEx (CUBLAS_COMPUTE_32F: no TF32) on one cuBLAS
//   handle per device, created on first use. With accumulate, cuBLAS may
//   round a*b to float16/bfloat16 before adding out (up to one rounding more
//   than the host device). add() and reduce() are kernels (reduce: bit for
//   bit the host device's result). Timing events
//   are CUDA events with timing; elapsedMs() is cudaEventElapsedTime.
// - fillRandom(), unary() and checkAgainst() are kernels, bit for bit the
//   host device's (NaN payloads too), but for gelu and silu, whose tanhf and
//   expf may differ by a few units in the last place. unary() in place
//   needs dtypes of one size (each element is read before it is written).
// - nativeStream() counts as work on the stream (the caller enqueues on it).
#pragma once

#include <string>

namespace hir {

// Adds "cuda" to the device registry (called by the registry itself).
void registerCudaDevice();

// cudaGetDeviceCount (CUDA_VISIBLE_DEVICES applies), 0 when the runtime finds
// no driver or no GPU; then `why` (when given) says so. What "cuda" being
// available and device/gpus.h's visibleGpuCount() both ask.
int cudaVisibleGpuCount(std::string* why);

}  // namespace hir
