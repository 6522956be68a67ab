// ipc's message protocol as a device runs it: the steps of its semaphore
// protocol (MessageStep, CountedStep), the inline lines of its small eager
// messages, and DeviceMessages, the part of a device that runs them.
// Private to the library: the public Device (<hostir/device.h>) offers it
// only through Device::messages(). A device that maps peer memory
// implements DeviceMessages (the host and cuda devices); for any other,
// messagesOf() gives the generic one, which runs the protocol over the
// device's public stream semaphores (waitValue, copy, writeValue), without
// counted or inline parts.
//
// Included by the cuda kernels, which nvcc compiles as C++17: nothing here
// may need C++20.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <hostir/device.h>
#include <hostir/types.h>

namespace hir {

// Inline flags (ipc's small eager messages; NCCL's LL protocol): a message
// of `bytes` travels as inlineLineBytes(bytes) bytes of 8-byte lines, line w
// holding the message's 4-byte word w (the last one zero-padded) in its low
// half and the flag inlineFlag(v) in its high half, stored as one 8-byte
// store. A receiver that sees a line's flag sees that line's data: no fence
// between the data and a signal, no signal word, no wait on one. The flag
// is never 0 (what the memory held before the first message) and differs
// from the flag of the slot's previous message (v - slots, slots <= 2^30).
// So the memory a receiver polls must hold nothing but lines: bytes of
// another kind (a larger message's data) could hold any flag (ipc keeps a
// line area per slot, apart from the slot).
inline constexpr std::size_t inlineLineBytes(std::size_t bytes) { return (bytes + 3) / 4 * 8; }
inline constexpr uint32_t inlineFlag(uint32_t v) { return v != 0 ? v : 0x80000000u; }
// What a pull stores into its mark before it posts (MessageStep's direct
// delivery): anything but v.
inline constexpr uint32_t directMarkReset(uint32_t v) { return v ^ 0x80000000u; }

// Messages of a semaphore protocol (ipc's eager messages, and the sources
// of its one-shot reductions) done as one device step: DeviceMessages::reduce
// does them around its reduction, DeviceMessages::messageStep without one. Every part
// has a number v = (counter != nullptr ? *counter : 0) + number, read when
// the step runs (a counter: in this device's memory, as CountedStep's), and
// `slotted` parts lie in a ring of `slots` (a power of two) of `stride`
// bytes, at slot v % slots. Waits compare cyclically, as waitValue does,
// and end early when *release != 0 (release may be null; the step then
// goes on with whatever is there: the run failed). A push's store of v is a
// release at system scope, after its copy is visible to the peer; a pull's
// or a source's store of v says only that it was read, after every read of
// it (nothing the step wrote is published by it). Stores are made in the
// order of the parts (parts of one lane store into the same word, which
// must end at the last number), and a step's pushes never share a counter
// with its pulls or sources (they are the two directions of a lane). In
// order:
// 1. pushes (copies to peers: ipc's eager sends, and a post's puts and
//    gets): push k waits until *wait >= v - wait_back (its slot is free),
//    copies `bytes` from src to dst (moved to its slot when slotted); then
//    every push stores v into *signal and advances *counter by `advance`.
//    Every push signals before the step waits for anything else, so a peer
//    never waits for this step to start. A step's pushes are independent
//    (none reads or writes what another writes, and each waits only for a
//    peer's signal): a device may run them one after the other or at once
//    (cuda: one grid), as long as their stores of v are in push order.
// 2. pulls (copies from peers: ipc's eager receives, messageStep only):
//    pull k waits until *wait >= v, copies `bytes` from src (moved to its
//    slot when slotted) to dst, stores v into *signal, advances *counter.
// 3. the reduction's sources (reduce only): source j with waits[j],
//    signals[j] or counters[j] has number v_j; wait until
//    *waits[j] >= v_j; source j is srcs[j], or its slot when slotted[j];
//    the reduction; store v_j into *signals[j]; *counters[j] +=
//    advances[j].
// With a step, a reduce of no elements still does every part but the
// reduction. stride keeps the alignment of the buffers.
// Inline parts (DeviceMessages::supportsInline(); `inline_flags`, of
// 1 to inlineFlagsMax() bytes, their end in the ring 8-byte aligned): a
// push writes the lines of its bytes (inlineLineBytes) into its slot, after
// its wait as any push; a pull or a source has no wait word: it waits until
// every line of its slot holds inlineFlag(v) (or *release != 0), then reads
// the data out of the lines. Their signals and counters are as above, but
// a push's signal need not be ordered after its lines (they carry their
// own flags; the signal only tells the lane's latest number).
// Direct delivery (optional for a device: it may ignore these fields, and
// then moves every message through its slot): a pull with `posted` may,
// when it starts, store directMarkReset(v) into its mark (*mark, or slot
// v % slots of the ring of words at `mark` when slotted), then release v
// into *posted (its dst is then free for the peer to write), and must then,
// after its wait, read the mark: v means the data is already in dst (no
// copy). Only the push can have stored v there, after it saw *posted. A
// push with `direct` (the receiver's buffer, mapped) may, when *posted >= v
// (cyclic) before or while it waits, copy to `direct` instead of its slot
// and store v into its mark before its signal (which then publishes both).
// Marks and `posted` belong to parts not in lines, and the caller gives
// `posted` to a pull only when it is its step's one pull of its lane (with
// two, the later number's direct mark could overwrite the earlier's in a
// ring of one slot).
struct MessageStep {
  std::array<uint32_t*, kMaxReduceSources> counters{};
  std::array<uint32_t, kMaxReduceSources> numbers{};
  std::array<uint32_t, kMaxReduceSources> advances{};
  std::array<const uint32_t*, kMaxReduceSources> waits{};
  std::array<uint32_t*, kMaxReduceSources> signals{};
  std::array<bool, kMaxReduceSources> slotted{};
  std::array<bool, kMaxReduceSources> inline_flags{};  // sources in lines
  const uint32_t* release = nullptr;
  uint32_t slots = 0;
  std::size_t stride = 0;
  // A push or a pull.
  struct Copy {
    uint32_t* counter = nullptr;
    uint32_t number = 0, advance = 0, wait_back = 0;
    const uint32_t* wait = nullptr;
    void* dst = nullptr;
    const void* src = nullptr;
    std::size_t bytes = 0;
    uint32_t* signal = nullptr;
    bool slotted = false;
    bool inline_flags = false;  // the slot holds lines (push: writes them; pull: reads them)
    void* direct = nullptr;      // push: the receiver's buffer (direct delivery)
    uint32_t* posted = nullptr;  // push: read; pull: written (direct delivery)
    uint32_t* mark = nullptr;    // push: written; pull: read and reset (direct delivery)
  };
  using Push = Copy;
  std::array<Copy, kMaxReduceSources> pushes{};
  std::size_t push_count = 0;
  std::array<Copy, kMaxReduceSources> pulls{};
  std::size_t pull_count = 0;
};

// Whether part `c` of a MessageStep (a push when `push`) asks for direct
// delivery: not in lines, with a mark and a "posted" word, and for a push
// the receiver's buffer. A device that does direct delivery decides with
// this, for every part alike.
inline bool asksDirect(const MessageStep::Copy& c, bool push) {
  return !c.inline_flags && c.mark != nullptr && c.posted != nullptr &&
         (!push || c.direct != nullptr);
}

// One step of a semaphore protocol whose value is not the host's but
// v = *counter + offset, with `counter` in this device's memory and read when
// the step runs: captured into a graph, every replay counts on. In order,
// each part optional (null pointer, 0 bytes):
// - wait until (int32_t)(*wait_addr - (v - wait_back)) >= 0 (the cyclic
//   compare of waitValue), or until *release != 0 (release: this device's
//   memory, set when the protocol gives up; the step then goes on without
//   its data);
// - copy dst[0, bytes) = src[0, bytes), where, with slots > 0 (a ring of
//   slots, a power of two: ipc's eager messages), dst and src are first
//   moved by (v % slots) * dst_stride and (v % slots) * src_stride bytes;
// - store v into *signal_addr, after the copy is visible to whoever sees
//   the value (release at system scope);
// - *counter += advance.
// `counter` is touched only by the steps of one lane, which run in order
// (one stream, or streams ordered by events).
struct CountedStep {
  uint32_t* counter = nullptr;
  uint32_t offset = 0;
  uint32_t advance = 0;
  const uint32_t* wait_addr = nullptr;
  const uint32_t* release = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  uint32_t* signal_addr = nullptr;
  uint32_t wait_back = 0;
  uint32_t slots = 0;
  std::size_t dst_stride = 0, src_stride = 0;
};

// Part `c` (a push when `push`, else a pull) of `m`, numbered from its
// counter, as a CountedStep of its own: what a device without a fused
// message step enqueues for it.
inline CountedStep countedStepOf(const MessageStep& m, const MessageStep::Copy& c, bool push) {
  return CountedStep{.counter = c.counter,
                     .offset = c.number,
                     .advance = c.advance,
                     .wait_addr = c.wait,
                     .release = m.release,
                     .dst = c.dst,
                     .src = c.src,
                     .bytes = c.bytes,
                     .signal_addr = c.signal,
                     .wait_back = c.wait_back,
                     .slots = c.slotted ? m.slots : 0,
                     .dst_stride = c.slotted && push ? m.stride : 0,
                     .src_stride = c.slotted && !push ? m.stride : 0};
}

// The protocol's part of a device. Every call enqueues on `s`, as the
// Device's own calls do. The defaults are the generic protocol over the
// device's public calls (no counted or inline parts); a device that runs
// some of it better overrides those.
class DeviceMessages {
 public:
  virtual ~DeviceMessages() = default;
  DeviceMessages(const DeviceMessages&) = delete;
  DeviceMessages& operator=(const DeviceMessages&) = delete;

  // Counted parts: countedStep, and MessageStep parts and reduction
  // sources with a counter. Default false.
  virtual bool supportsCounted() const { return false; }
  // The largest message, in bytes, that MessageStep's parts may carry in
  // lines (inline_flags), on every path of messageStep and reduce; 0: none.
  // Default 0.
  virtual std::size_t inlineFlagsMax() const { return 0; }
  bool supportsInline() const { return inlineFlagsMax() > 0; }

  // waitValue(s, wait_addr, at_least), copy(s, dst, src, bytes), then
  // writeValue(s, signal_addr, value), as one step: what an ipc message's
  // copying side enqueues. Default: those three calls. A device may fuse
  // them (cuda: one kernel for copies up to HIR_CUDA_KERNEL_COPY_MAX).
  virtual void signaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                            const uint32_t* wait_addr, uint32_t at_least, uint32_t* signal_addr,
                            uint32_t value);
  // `step` (see CountedStep), with supportsCounted(). cuda: kernels (one
  // for copies up to HIR_CUDA_KERNEL_COPY_MAX), capturable; host: stream
  // tasks. Default: throws BackendError.
  virtual void countedStep(Stream& s, const CountedStep& step);
  // The pushes and pulls of `step` (its reduction sources unused). The
  // default does each as a signaledCopy (host numbers: slotted parts not
  // allowed) or a countedStep, pushes first, and takes no inline part;
  // cuda makes them one kernel when every part is at most
  // HIR_CUDA_KERNEL_COPY_MAX bytes.
  virtual void messageStep(Stream& s, const MessageStep& step);
  // Device::reduce(s, dst, srcs, sources, t, op, count) with the messages
  // of `sync` around it (MessageStep; its pulls must be empty); `sync` and
  // the pointer list are copied before the call returns. With `sync`, a
  // reduce of no elements still does every part but the reduction. The
  // default: the pushes (messageStep), each source's wait (waitValue), the
  // reduction (Device::reduce, sources moved to their slots), then each
  // source's signal (writeValue); host numbers only, no inline part.
  virtual void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources,
                      DType t, ReduceOp op, std::size_t count, const MessageStep& sync);

 protected:
  // `device`: the device whose public calls the defaults enqueue.
  explicit DeviceMessages(Device& device) : device_(device) {}
  Device& device() const { return device_; }

 private:
  Device& device_;
};

// The protocol of `d`: its own (Device::messages()), or, for a device
// without one (an embedder's), the generic one over d's public calls,
// made into `generic`, which must outlive its use.
DeviceMessages& messagesOf(Device& d, std::unique_ptr<DeviceMessages>& generic);

}  // namespace hir
