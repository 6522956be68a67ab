// Host-side launchers of the CUDA device's kernels: the data kernels
// (cuda_data_kernels.cu), the elementwise math (cuda_math_kernels.cu), the
// copies (cuda_copy_kernels.cu), the messages (cuda_message_kernels.cu), the
// reductions (cuda_reduce_kernels.cu), and their launch switches and
// preloading (cuda_launch.cu). Each returns the launch's error code; the
// caller checks it (cudaLaunchKernel reports launch errors directly, so no
// stale cudaGetLastError is involved).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "device/messages.h"
#include <hostir/device.h>
#include <hostir/types.h>

namespace hir {
struct CheckRecord;
}

namespace hir::cuda {

// Threads per block of the data kernels.
inline constexpr int kBlockThreads = 256;

// dst[k] = pattern(value, step, k) for k in [0, count), as common/elements.h
// defines it. Uses at most `max_blocks` blocks (grid-stride loop).
cudaError_t launchFill(cudaStream_t stream, void* dst, DType t, std::size_t count, int64_t value,
                       int64_t step, int max_blocks);

// Compares src[k] with the pattern like elementMatches() (within atol + rtol *
// |expected|) and accumulates into `record`, a device-accessible pointer to a
// CheckRecord in mapped host memory.
cudaError_t launchCheck(cudaStream_t stream, const void* src, DType t, std::size_t count,
                        int64_t value, int64_t step, Tolerance tolerance, CheckRecord* record,
                        int64_t execution, int max_blocks);

// dst[0, bytes) = src[0, bytes) by a kernel (device or peer-mapped memory);
// for small copies, where a kernel starts sooner than the copy engine.
cudaError_t launchCopy(cudaStream_t stream, void* dst, const void* src, std::size_t bytes,
                       int max_blocks);

// In one block: waits until *wait_addr >= at_least (GEQ, wrap-around safe),
// copies dst[0, bytes) = src[0, bytes), then stores `value` into
// *signal_addr with release semantics at system scope (the copy is visible
// to whoever sees the value). For small ipc messages: one kernel instead of
// a stream wait, a copy and a stream write. A null wait_addr or
// signal_addr skips that part; with 0 bytes it is a kernel semaphore (a wait,
// a signal, or both), the cuda device's waitValue and writeValue when
// HIR_CUDA_SEMAPHORES is "kernel".
cudaError_t launchSignaledCopy(cudaStream_t stream, void* dst, const void* src,
                               std::size_t bytes, const uint32_t* wait_addr, uint32_t at_least,
                               uint32_t* signal_addr, uint32_t value);

// launchSignaledCopy for a larger copy, by a grid of `blocks` blocks (at
// least 2) of kGridCopyThreads: every block waits for *wait_addr >=
// at_least, copies its share, and the last block to finish releases
// `value` into *signal_addr after every block's stores. `arrivals` is a
// word of device memory, 0 before the launch and 0 again after it, that
// no kernel of another stream uses at the same time (one per stream). A
// null wait_addr: no wait (the caller waited before, on the stream);
// signal_addr must not be null. `publish` false (the copy of a message's
// pull: its signal says only that src was read, and dst is the caller's):
// no system-scope fences, and a relaxed store of the signal once every
// block has read its share.
inline constexpr int kGridCopyThreads = 512;
cudaError_t launchGridSignaledCopy(cudaStream_t stream, void* dst, const void* src,
                                   std::size_t bytes, const uint32_t* wait_addr,
                                   uint32_t at_least, uint32_t* signal_addr, uint32_t value,
                                   uint32_t* arrivals, int blocks, bool publish = true);

// DeviceMessages::countedStep's parts in one block (see CountedStep): v = *counter
// + offset, *counter += advance, wait for *wait_addr >= v - step.wait_back
// (ended early by *release != 0), copy dst[0, bytes) = src[0, bytes) (none
// for 0 bytes; with slots, both moved to slot v % slots first), release v
// into *signal_addr; null pointers skip their part. `step` gives the
// addresses; the three arguments after it override its counter's advance,
// whether it waits and whether it copies and signals (a copy-engine copy
// between two kernels splits one step).
cudaError_t launchCountedStep(cudaStream_t stream, const CountedStep& step, uint32_t advance,
                              bool wait, bool copy_and_signal);

// A whole counted step (its wait, copy, signal and advance) by a grid of
// `blocks` blocks (at least 2) of kGridCopyThreads: each block reads the
// counter and waits, copies its share, and the last block to finish
// advances the counter and signals, after every block's stores. `arrivals`
// and `publish` as launchGridSignaledCopy's.
cudaError_t launchGridCountedStep(cudaStream_t stream, const CountedStep& step,
                                  uint32_t* arrivals, int blocks, bool publish = true);

// The copy part of a counted step over slots (step.slots > 0), with up to
// `max_blocks` blocks: dst and src moved to slot (*counter + offset) % slots
// when it runs. No wait, no signal, no advance.
cudaError_t launchSlotCopy(cudaStream_t stream, const CountedStep& step, int max_blocks);

// out[k] = a[k] + b[k] for k in [0, count) (out may be a or b): floating
// dtypes add in their precision (float16 and bfloat16 in float, rounded to
// nearest even, bit for bit what the host device gives), integers wrap
// around. Uses at most `max_blocks` blocks (grid-stride loop).
cudaError_t launchAdd(cudaStream_t stream, void* out, const void* a, const void* b, DType t,
                      std::size_t count, int max_blocks);

// The elementwise math of cuda_math_kernels.cu, each bit for bit what the
// host device gives (gelu and silu within a few units in the last place),
// with at most `max_blocks` blocks (grid-stride loop).
//
// dst[k] = randomElement(t, pattern, k) (common/elements.h) for k in [0,
// count): Device::fillRandom.
cudaError_t launchFillRandom(cudaStream_t stream, void* dst, DType t, std::size_t count,
                             const RandomPattern& pattern, int max_blocks);
// Device::unary as hostUnary() computes it (device/compute.cc). args.out may
// be args.in when both dtypes have one size. cudaErrorInvalidValue for an op
// other than Cast of other than one floating dtype in and out.
cudaError_t launchUnary(cudaStream_t stream, const UnaryArgs& args, int max_blocks);
// Device::checkAgainst: got[k] (dtype t) against expected[k] (dtype et) as
// int64 when both dtypes are integer, else as double, within `tolerance`
// (closeEnough()); counts and reports into `record` as launchCheck does.
cudaError_t launchCheckAgainst(cudaStream_t stream, const void* got, DType t,
                               const void* expected, DType et, std::size_t count,
                               Tolerance tolerance, CheckRecord* record, int64_t execution,
                               int max_blocks);

// dst[k] = srcs[0][k] op srcs[1][k] op ... op srcs[n-1][k] for k in [0,
// count), combined left to right as common/reductions.h combines (float16 and
// bfloat16 in float, rounded back at every step; integers wrap), bit for bit
// what the host device gives; avg divides the sum by n in the dtype (integers
// truncate toward zero). dst may be one of the sources. 1 <= n <=
// kMaxReduceSources (device.h); the pointers go into the kernel's parameters
// (no device memory, capturable), 16 bytes per source and step when dst and
// every source are 16-byte aligned. Uses at most `max_blocks` blocks
// (grid-stride loop). With `sync` (MessageStep, messages.h): its waits, the
// reduction and its signals are one kernel of one block when the elements
// take at most `fuse_max` bytes; above, with `grid` (the caller gives it
// for the sizes it wants in one grid kernel) and without pushes, one
// kernel of grid->blocks blocks (at least 2) whose every block waits and
// whose last block to count itself in *grid->arrivals (a word of device
// memory at 0, left at 0; as launchGridSignaledCopy's) signals; else a wait
// kernel, the grid's reduction and a signal kernel (also the wait and
// signal kernel alone for no elements). stamps: the kernel stamps' sink
// (KernelStampSink, below), null when off.
struct KernelStampSink;
struct ReduceGrid {
  uint32_t* arrivals = nullptr;
  int blocks = 0;
};
cudaError_t launchReduce(cudaStream_t stream, void* dst, const void* const* srcs, int n, DType t,
                         ReduceOp op, std::size_t count, const MessageStep* sync, int max_blocks,
                         std::size_t fuse_max, const ReduceGrid* grid = nullptr,
                         const KernelStampSink* stamps = nullptr);

// DeviceMessages::messageStep's pushes and pulls (MessageStep, messages.h) as one
// kernel of one block. stamps: the kernel stamps' sink, null when off.
cudaError_t launchMessageStep(cudaStream_t stream, const MessageStep& step,
                              const KernelStampSink* stamps = nullptr);

// DeviceMessages::messageStep of pushes only (no pulls, no part in lines or asking
// for direct delivery) as one kernel of a grid of kGridCopyThreads-thread
// blocks, blocks[k] of them (at least 1) for push k: each block reads its
// push's number and waits for its slot, the push's blocks copy it, and the
// last block to count itself in *arrivals (as launchGridSignaledCopy's)
// releases every push's signal and advances its counter, in push order.
// The pushes move at once, each to its own peer.
cudaError_t launchGridMessageStep(cudaStream_t stream, const MessageStep& step,
                                  uint32_t* arrivals, const int* blocks);

// One thread that busy-waits `nanoseconds` of GPU global time (for tests and
// benchmarks that need a long-running kernel).
cudaError_t launchSpin(cudaStream_t stream, uint64_t nanoseconds);

// Whether kernels of one block are launched as programmatic dependents of
// the kernel before them on their stream (on by default; launchKernel in
// cuda_kernel_common.cuh says why one block only). Process-wide; CudaDevice sets it
// from HIR_CUDA_PDL when it is created, and off below compute capability 9.0.
void setProgrammaticLaunch(bool on);

// Whether a small reduction whose sources are in lines loads every source at
// once, one thread per source and unit, when there are at most as many of
// those as the block has threads (on by default); off, each thread loads its
// units source after source. Process-wide; CudaDevice sets it from
// HIR_CUDA_SPREAD_SOURCES when it is created.
void setSpreadSources(bool on);

// Whether a one-block step's pushes, when each is in lines, of at most 128
// bytes, and no two share a counter or a signal, go each in a warp of its
// own at the kernel's start, every load of a push issued before any is used
// (on by default); off, the block does them one after the other.
// Process-wide; CudaDevice sets it from HIR_CUDA_PUSHES_AT_ONCE.
void setPushesAtOnce(bool on);

// Kernel stamps, a diagnosis (HIR_CUDA_STAMPS, docs/cli.md): given a
// KernelStampSink, a launch's one-block message or reduction kernel
// (messageStepKernel, reduceLinesKernel, reduceFusedKernel: the small
// messages' and small reductions' kernels) writes one record of the GPU's
// global timer (ns) at eight points of its run, thread 0's view, into the
// sink's ring.
enum class KernelStampKind : uint32_t { MessageStep = 1, ReduceLines = 2, ReduceFused = 3 };
struct KernelStamp {
  uint64_t entry;     // its first instruction
  uint64_t followed;  // after its wait for the kernel before it (followPrevious)
  uint64_t numbered;  // after its parts' numbers were read (readNumbers)
  uint64_t slotted;   // after its pushes' slot waits (0: no pushes)
  uint64_t copied;    // after its pushes' copies (0: no pushes)
  uint64_t pushed;    // after its pushes: their numbers, slots, copies and signals
  uint64_t waited;    // after its waits and its pulls or its reduction
  uint64_t end;       // its signals issued (their stores may still be in flight)
  uint32_t kind;      // a KernelStampKind
  uint32_t sm;        // the SM it ran on
};
// Where a launch's kernel writes its stamps: a ring of mask + 1 records (a
// power of two) on the launching device; *next, zero at first, counts the
// records ever written, the last mask + 1 of which the ring holds. One per
// device (KernelStampRing), passed to each launch: no process-wide state.
// Both pointers are set, or neither.
struct KernelStampSink {
  KernelStamp* ring = nullptr;
  uint32_t* next = nullptr;
  uint32_t mask = 0;
};

// Loads every kernel of the cuda device into the current device's context
// (cudaFuncGetAttributes), launching none. Under CUDA's lazy loading (the
// default since CUDA 12.2) a kernel is otherwise loaded at its first launch,
// which may wait for the kernels running on the device: a launch made while
// an ipc copy kernel polls for a peer's signal could then wait for that
// signal, and the peer for ours (CudaDevice calls this when it is created).
cudaError_t preloadKernels();

}  // namespace hir::cuda
