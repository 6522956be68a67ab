// What the message kernels (cuda_message_kernels.cu) and the reduce kernels
// (cuda_reduce_kernels.cu) share: a MessageStep's arguments by value
// (SyncSources, filled by placeCopies), inline lines, the kernel stamps,
// and the one-block kernel's start (readNumbers) and its pushes and pulls
// (syncCopies).
//
// Included by .cu files only; the device helpers stay in an anonymous
// namespace, as in cuda_kernel_common.cuh. The argument structs are named,
// since placeCopies, which fills them, is defined once (with the switch it
// reads) in cuda_message_kernels.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda/cuda_kernel_common.cuh"
#include "device/cuda/cuda_kernels.h"
#include "device/messages.h"

namespace hir::cuda {

// MessageStep (messages.h) by value: a captured graph holds it.
struct CopyArgs {  // a push or a pull
  uint32_t* counter;
  uint32_t number, advance, wait_back;
  const uint32_t* wait;
  char* dst;
  const char* src;
  std::size_t bytes;
  uint32_t* signal;
  char* direct;      // direct delivery (messages.h): a push's other destination
  uint32_t* posted;  // a push reads it, a pull stores its number into it
  uint32_t* mark;    // a push stores its number into it when direct; a pull reads it
};
struct SyncSources {
  uint32_t* counter[kMaxReduceSources];
  uint32_t number[kMaxReduceSources];
  uint32_t advance[kMaxReduceSources];
  const uint32_t* wait[kMaxReduceSources];
  uint32_t* signal[kMaxReduceSources];
  const uint32_t* release;
  uint32_t slotted;  // bit j: source j is in a ring
  uint32_t mask;     // slots - 1
  std::size_t stride;
  CopyArgs push[kMaxReduceSources];
  CopyArgs pull[kMaxReduceSources];
  int pushes, pulls;
  uint32_t push_slotted, pull_slotted;  // bit k: push (pull) k is in a ring
  uint32_t push_inline, pull_inline;    // bit k: push (pull) k in lines (inline flags)
  uint32_t inline_sources;              // bit j: source j in lines
  bool copies_wide;  // every push's and pull's ends, size and the stride are 16-byte multiples
  bool pushes_at_once;  // pushLinesAtOnce (placeCopies says when)
  KernelStampSink stamps;  // the kernel stamps' ring; its ring null when off
};

// A MessageStep's pushes and pulls, and what they share, and the kernel
// stamps' sink (null when off) into the kernel's arguments.
void placeCopies(const MessageStep& m, const KernelStampSink* stamps, SyncSources& y);

namespace {

// Inline lines (messages.h): 8 bytes, the data word low, the flag high, in
// one store and one load at system scope. Each is a single 64-bit access,
// not a vector of two 32-bit ones, which the PTX memory model may split:
// an aligned 8-byte access is not torn, over NVLink too (NCCL's LL
// protocol relies on the same).
__device__ __forceinline__ void storeLine(void* p, uint32_t data, uint32_t flag) {
  const unsigned long long line = (static_cast<unsigned long long>(flag) << 32) | data;
  asm volatile("st.volatile.global.b64 [%0], %1;" ::"l"(p), "l"(line) : "memory");
}
__device__ __forceinline__ uint2 loadLine(const void* p) {
  unsigned long long line;
  asm volatile("ld.volatile.global.b64 %0, [%1];" : "=l"(line) : "l"(p) : "memory");
  return make_uint2(static_cast<uint32_t>(line), static_cast<uint32_t>(line >> 32));
}

// messages.h's inlineFlag, on the device (a constexpr host function there).
__device__ __forceinline__ uint32_t lineFlag(uint32_t v) { return v != 0 ? v : 0x80000000u; }
static_assert(inlineFlag(0) == 0x80000000u && inlineFlag(1) == 1 && inlineFlag(~0u) == ~0u,
              "lineFlag is inlineFlag");
// messages.h's directMarkReset, on the device.
__device__ __forceinline__ uint32_t markReset(uint32_t v) { return v ^ 0x80000000u; }
static_assert(directMarkReset(5) == (5u ^ 0x80000000u), "markReset is directMarkReset");

// Word w of a message of `bytes` (the last one zero-padded), 4-byte loads
// when src is 4-byte aligned.
__device__ __forceinline__ uint32_t wordOf(const char* src, std::size_t bytes, std::size_t w) {
  if ((w + 1) * 4 <= bytes && reinterpret_cast<uintptr_t>(src) % 4 == 0)
    return reinterpret_cast<const uint32_t*>(src)[w];
  uint32_t x = 0;
  for (std::size_t b = 0; b < 4 && w * 4 + b < bytes; ++b)
    x |= static_cast<uint32_t>(static_cast<unsigned char>(src[w * 4 + b])) << (8 * b);
  return x;
}
__device__ __forceinline__ void putWord(char* dst, std::size_t bytes, std::size_t w, uint32_t x) {
  if ((w + 1) * 4 <= bytes && reinterpret_cast<uintptr_t>(dst) % 4 == 0) {
    reinterpret_cast<uint32_t*>(dst)[w] = x;
    return;
  }
  for (std::size_t b = 0; b < 4 && w * 4 + b < bytes; ++b)
    dst[w * 4 + b] = static_cast<char>((x >> (8 * b)) & 0xffu);
}

// The block writes the lines of src[0, bytes) into dst, flagged `flag`.
__device__ void blockPushLines(char* dst, const char* src, std::size_t bytes, uint32_t flag) {
  for (std::size_t w = threadIdx.x; w * 4 < bytes; w += blockDim.x)
    storeLine(dst + w * 8, wordOf(src, bytes, w), flag);
}

// Lines a thread loads before it looks at any: their loads are in flight
// together, so a message of kLineBatch lines per thread costs one round
// trip to the memory, not kLineBatch.
constexpr int kLineBatch = 4;

// The data words of kN lines of src, line[i] for each i (those at or past
// `lines` are skipped): every load is issued before any is looked at, then
// each line is loaded again until it holds `flag` (or the release word is
// set). The one poll of lines, for pulls and reductions alike.
template <int kN>
__device__ __forceinline__ void loadFlaggedLines(uint32_t (&word)[kN], const char* src,
                                                 const std::size_t (&line)[kN], std::size_t lines,
                                                 uint32_t flag, const uint32_t* release) {
  uint2 got[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i)
    if (line[i] < lines) got[i] = loadLine(src + line[i] * 8);
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (line[i] >= lines) continue;
    for (unsigned polls = 1; got[i].y != flag; ++polls) {
      if (polls % kReleaseEvery == 0 && released(release)) break;
      got[i] = loadLine(src + line[i] * 8);
    }
    word[i] = got[i].x;
  }
}

// The block reads the lines of src into dst[0, bytes), each once it holds
// `flag`.
__device__ void blockPullLines(char* dst, const char* src, std::size_t bytes, uint32_t flag,
                               const uint32_t* release) {
  const std::size_t words = (bytes + 3) / 4, step = blockDim.x;
  for (std::size_t base = threadIdx.x; base < words; base += step * kLineBatch) {
    std::size_t line[kLineBatch];
    uint32_t word[kLineBatch];
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b) line[b] = base + b * step;
    loadFlaggedLines(word, src, line, words, flag, release);
#pragma unroll
    for (int b = 0; b < kLineBatch; ++b)
      if (line[b] < words) putWord(dst, bytes, line[b], word[b]);
  }
}

// blockCopy for the message kernels' pushes and pulls (apart): when the
// copy takes more than one step, kCopyBatch vectors per thread are loaded
// before any is stored (copyVectorsInBatches), so the block waits for one
// round trip to the source per batch (16 KiB at 256 threads), not per 16
// bytes per thread. The fused signaled and counted copies keep blockCopy
// (docs/performance.md, "ipc's kernels back to back, and one block's round
// trips", says why).
__device__ void blockCopyInBatches(void* dst, const void* src, std::size_t bytes, bool wide) {
  if (!wide || bytes / 16 <= blockDim.x) return blockCopy(dst, src, bytes, wide);
  copyVectorsInBatches(dst, src, bytes / 16, threadIdx.x, blockDim.x);
}

// The kernel stamps (KernelStampSink), thread 0's view: the global timer
// now, 0 when they are off or for another thread.
__device__ __forceinline__ uint64_t stampNow(const SyncSources& y) {
  uint64_t t = 0;
  if (y.stamps.ring != nullptr && threadIdx.x == 0)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
// The points inside a kernel's pushes (thread 0's, in shared memory):
// [0] numbers read, [1] slot waits done, [2] copies done.
struct PushStamps {
  uint64_t at[3];
};
__device__ __forceinline__ void stampAt(const SyncSources& y, PushStamps* p, int k) {
  if (p != nullptr && threadIdx.x == 0) p->at[k] = stampNow(y);
}
// Thread 0 writes the kernel's record, `end` now.
__device__ __forceinline__ void stampRecord(const SyncSources& y, KernelStampKind kind,
                                            uint64_t entry, uint64_t followed,
                                            const PushStamps& inside, uint64_t pushed,
                                            uint64_t waited) {
  if (y.stamps.ring == nullptr || threadIdx.x != 0) return;
  const uint64_t end = stampNow(y);
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  KernelStamp& r = y.stamps.ring[atomicAdd(y.stamps.next, 1u) & y.stamps.mask];
  r = KernelStamp{entry,  followed, inside.at[0], inside.at[1], inside.at[2], pushed, waited,
                  end,    static_cast<uint32_t>(kind), sm};
}
// The numbers of a one-block kernel's parts, read at its start by threads
// of their own (pushes by threads 0.., pulls by 32.., sources by 64..), so
// that the counters' loads are in flight together instead of one phase
// after the other. A step's pushes and its pulls or sources never share a
// counter (messages.h), so a push's advance cannot change what a pull reads.
// Each of those threads also loads its part's wait word (with acquire) in
// the same round trip, into `seen`: a push's slot is free long before in a
// steady stream of messages, and its wait then costs no load of its own.
struct StepNumbers {
  uint32_t push[kMaxReduceSources], pull[kMaxReduceSources], source[kMaxReduceSources];
  uint32_t push_seen[kMaxReduceSources], pull_seen[kMaxReduceSources],
      source_seen[kMaxReduceSources];
};
static_assert(kBlockThreads >= 64 + static_cast<int>(kMaxReduceSources),
              "readNumbers needs 80 threads");
// Direct delivery (messages.h). A part's mark: its own word, or the word of
// its number's slot in a ring of marks.
__device__ __forceinline__ uint32_t* markOf(const SyncSources& y, const CopyArgs& p,
                                            bool slotted, uint32_t v) {
  return p.mark + (slotted ? (v & y.mask) : 0u);
}
// A pull's post, first thing in its kernel: its mark reset (no stale mark
// can equal v), then v released into the sender's `posted`: the pull's
// destination is free for the sender to write.
__device__ __forceinline__ void post(const SyncSources& y, const CopyArgs& p, bool slotted,
                                     uint32_t v) {
  storeRelaxedSys(markOf(y, p, slotted, v), markReset(v));
  storeReleaseSys(p.posted, v);
}
// A push with a direct destination: true when the receiver posted v, seen
// before its slot is free or while it waits for it (`first`: the wait
// word's first load); false once the slot is free (or the release word
// is set).
__device__ bool waitSlotOrPost(const SyncSources& y, const CopyArgs& p, uint32_t v,
                               uint32_t first) {
  const uint32_t slot_free = v - p.wait_back;
  for (unsigned polls = 1;; ++polls) {
    if (static_cast<int32_t>(loadAcquireSys(p.posted) - v) >= 0) return true;
    if (p.wait == nullptr || static_cast<int32_t>(first - slot_free) >= 0) return false;
    if (polls % kReleaseEvery == 0 && released(y.release)) return false;
    first = loadAcquireSys(p.wait);
  }
}

// A part's counter and wait word, both loads issued before either is used.
__device__ __forceinline__ void readPart(const uint32_t* counter, uint32_t number,
                                         const uint32_t* wait, uint32_t& v, uint32_t& seen) {
  const uint32_t base = counter != nullptr ? *static_cast<const volatile uint32_t*>(counter) : 0u;
  seen = wait != nullptr ? loadAcquireSys(wait) : 0u;
  v = number + base;
}
// The words of a push that pushLinesAtOnce takes: a warp's lanes hold them.
constexpr std::size_t kAtOnceLineBytes = 4 * 32;
// The warp of push k (pushLinesAtOnce): the pushes start at warp 3, past
// the threads that read the pulls' and the sources' numbers (32.. and 64..,
// readNumbers), which then run beside them up to 5 pushes.
constexpr int kFirstPushWarp = 3;

// A step's pushes when each is in lines, of at most kAtOnceLineBytes, and
// no two share a counter or a signal (placeCopies checks): each is done
// start to end by a warp of its own, the pushes at once instead of one
// after the other, with no barrier of the block in them. Every load it
// needs (the counter, the wait word, the words of the message) is issued
// before any is used: one round trip to the memory, then the stores. Its
// signal is ordered after nothing: a push in lines publishes nothing by it
// (messages.h), and the pushes' signals are distinct words, so that their
// order does not show.
__device__ void pushLinesAtOnce(const SyncSources& y) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  for (int k = (warp - kFirstPushWarp % warps + warps) % warps; k < y.pushes; k += warps) {
    const CopyArgs& p = y.push[k];
    const uint32_t word =
        static_cast<std::size_t>(lane) * 4 < p.bytes ? wordOf(p.src, p.bytes, lane) : 0u;
    uint32_t v = 0, seen = 0;
    if (lane == 0) readPart(p.counter, p.number, p.wait, v, seen);
    v = __shfl_sync(0xffffffffu, v, 0);
    if (lane == 0 && p.wait != nullptr) waitAtLeast(p.wait, v - p.wait_back, seen, y.release);
    __syncwarp();
    const std::size_t slot = (y.push_slotted >> k) & 1u ? (v & y.mask) * y.stride : 0;
    if (static_cast<std::size_t>(lane) * 4 < p.bytes)
      storeLine(p.dst + slot + static_cast<std::size_t>(lane) * 8, word, lineFlag(v));
    if (lane == 0) {
      if (p.signal != nullptr) storeRelaxedSys(p.signal, v);
      if (p.counter != nullptr && p.advance != 0) *p.counter = v - p.number + p.advance;
    }
  }
}

// Every thread of the block calls it (it ends with a barrier). With
// pushes_at_once, the pushes are done here too (pushLinesAtOnce).
__device__ void readNumbers(const SyncSources& y, int n, StepNumbers& s) {
  const int t = static_cast<int>(threadIdx.x);
  if (y.pushes_at_once) {
    pushLinesAtOnce(y);
  } else if (t < y.pushes) {
    const CopyArgs& p = y.push[t];
    readPart(p.counter, p.number, p.wait, s.push[t], s.push_seen[t]);
  }
  if (t >= 32 && t < 32 + y.pulls) {
    const CopyArgs& p = y.pull[t - 32];
    readPart(p.counter, p.number, p.wait, s.pull[t - 32], s.pull_seen[t - 32]);
    if (p.posted != nullptr)
      post(y, p, ((y.pull_slotted >> (t - 32)) & 1u) != 0, s.pull[t - 32]);
  } else if (t >= 64 && t < 64 + n) {
    readPart(y.counter[t - 64], y.number[t - 64], y.wait[t - 64], s.source[t - 64],
             s.source_seen[t - 64]);
  }
  __syncthreads();
}

// One block: thread k < count reads copy k's number and waits (a push: for
// v - wait_back, its slot; a pull: for v, its message); the block copies
// each (a push into its slot, a pull out of it; inline parts as lines);
// after a barrier, thread 0 signals each copy and advances its counter, in
// order.
__device__ void syncCopies(const SyncSources& y, const CopyArgs* c, int count, uint32_t slotted,
                           bool push, const uint32_t* numbers, const uint32_t* seen,
                           PushStamps* marks = nullptr) {
  __shared__ uint32_t cv[kMaxReduceSources];
  __shared__ bool direct[kMaxReduceSources];  // delivered straight into the receiver's buffer
  const int k = static_cast<int>(threadIdx.x);
  if (k < count) {
    const CopyArgs& p = c[k];
    uint32_t first = 0;
    if (numbers != nullptr) {
      cv[k] = numbers[k];
      first = seen[k];
    } else {
      readPart(p.counter, p.number, p.wait, cv[k], first);
    }
    direct[k] = false;
    if (push && p.direct != nullptr)
      direct[k] = waitSlotOrPost(y, p, cv[k], first);
    else if (p.wait != nullptr)
      waitAtLeast(p.wait, push ? cv[k] - p.wait_back : cv[k], first, y.release);
    // A pull that posted (readNumbers): its mark says where the data is.
    if (!push && p.posted != nullptr)
      direct[k] = loadAcquireSys(markOf(y, p, ((slotted >> k) & 1u) != 0, cv[k])) == cv[k];
  }
  __syncthreads();
  stampAt(y, marks, 1);
  const uint32_t lines = push ? y.push_inline : y.pull_inline;
  bool publishes = false;  // a plain push that signals: its data must be visible first
  for (int i = 0; i < count; ++i) {
    const CopyArgs& p = c[i];
    const std::size_t slot = (slotted >> i) & 1u ? (cv[i] & y.mask) * y.stride : 0;
    char* dst = direct[i] && push ? p.direct : p.dst + (push ? slot : 0);
    const char* src = p.src + (push ? 0 : slot);
    if (direct[i] && !push) continue;  // the sender wrote it into dst
    if (!((lines >> i) & 1u)) {
      blockCopyInBatches(dst, src, p.bytes, y.copies_wide);
      publishes = publishes || (push && p.signal != nullptr);
    } else if (push) {
      blockPushLines(dst, src, p.bytes, lineFlag(cv[i]));
    } else {
      blockPullLines(dst, src, p.bytes, lineFlag(cv[i]), y.release);
    }
  }
  __syncthreads();
  stampAt(y, marks, 2);
  // One thread, in order: parts of one lane signal the same word, whose
  // value must end at the last of their numbers. A plain push's data went
  // to a peer: thread 0 fences and releases its signal. A push in lines
  // publishes nothing by its signal (its lines carry their flags), and a
  // pull's signal says what was read ("free"; every thread consumed it
  // before the barrier): relaxed stores, which wait for no earlier store.
  if (k == 0) {
    if (publishes) __threadfence_system();
    for (int i = 0; i < count; ++i) {
      const CopyArgs& p = c[i];
      if (direct[i] && push)
        storeRelaxedSys(markOf(y, p, ((slotted >> i) & 1u) != 0, cv[i]), cv[i]);
      if (p.signal != nullptr && push && !((lines >> i) & 1u))
        storeReleaseSys(p.signal, cv[i]);
      else if (p.signal != nullptr)
        storeRelaxedSys(p.signal, cv[i]);
      if (p.counter != nullptr && p.advance != 0) *p.counter = cv[i] - p.number + p.advance;
    }
  }
  __syncthreads();
}

__device__ void syncPush(const SyncSources& y, const StepNumbers* numbers,
                         PushStamps* marks = nullptr) {
  syncCopies(y, y.push, y.pushes, y.push_slotted, true,
             numbers != nullptr ? numbers->push : nullptr,
             numbers != nullptr ? numbers->push_seen : nullptr, marks);
}

}  // namespace

}  // namespace hir::cuda
