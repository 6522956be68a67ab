// The host (CPU) device: what CI runs, so it keeps CUDA's asynchronous
// semantics (see device.h) rather than running work on the calling thread.
//
// - Each stream is a worker thread running its queue of tasks in order; an
//   enqueueing call returns at once. Idle workers sleep on a condition
//   variable.
// - An event record is a completion token: record(e, s) makes a new token and
//   enqueues a task on s that completes it; wait(s, e) captures e's token at
//   call time, so a later re-record does not affect that wait.
// - A stream task that blocks (an event wait, waitValue) gives up after the
//   stream-wait timeout and sets the device's sticky error. Any exception a
//   task throws is the sticky error too. Once set, later tasks are skipped
//   and query()/synchronize() throw BackendError with its message.
// - Each stream queues at most runAheadWindow() tasks (default 1024): an
//   enqueue from the host that finds its stream's queue full blocks until
//   the queue is down to half; a stream that takes no task for the
//   stream-wait timeout meanwhile fails the device, and the enqueue throws
//   TimeoutError naming the stream (Worker, in host_device_impl.h, says why
//   this cannot deadlock). Enqueues from stream tasks never block.
// - Memory is memfd-backed shared memory, zeroed (so semaphores start at 0),
//   that another process of the same node (same user) can map through
//   /proc/<pid>/fd/<fd> (IPC). Each allocation holds one file descriptor
//   until deallocate(). An allocation of 1 MiB or more that this process
//   cannot be given now (MemAvailable + SwapFree, a cgroup's memory limit,
//   RLIMIT_AS; less what earlier allocations have not written yet) is
//   refused with a RuntimeError naming its bytes and that bound, and so is
//   one that the system calls refuse for lack of memory.
// - deallocate() and freeCheckRecords() first wait for the work enqueued so
//   far on every stream, as cudaFree does (unless called from a stream task).
// - Stream semaphores are 32-bit atomics; waitValue() polls with backoff
//   because the writer may be another process. Values compare as unsigned:
//   wrap-around of the 32-bit sequence is not handled.
// - Compute (matmul, add) and reduce run on the stream's worker: matmul
//   through OpenBLAS (device/compute.h), reduce through common/reductions.h
//   (the host backends' arithmetic), a few KiB at a time through a buffer on
//   the worker's stack, so that dst may be one of the sources. Timing
//   events stamp steady_clock when the stream's worker reaches their
//   record().
// - Streams (and wrappers) must be destroyed before the device. Destroying a
//   stream drains it (after a failure: skips what is queued); destroying the
//   device drains the default stream, and a task of it still blocked in a
//   wait then gives up (skipping the rest). cancel() fails the device at
//   once, so that destroying it after a failure or a timeout is fast.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "device/messages.h"
#include <hostir/device.h>

namespace hir {

// It runs ipc's message protocol itself (DeviceMessages, host_messages.cc).
class HostDevice : public Device, public DeviceMessages {
 public:
  static constexpr Duration kDefaultStreamWaitTimeout = std::chrono::minutes(10);
  // Tasks one stream may queue ahead of its worker (the host blocks beyond).
  static constexpr std::size_t kDefaultRunAheadWindow = 1024;
  // Allocations from this size on are checked against the memory the
  // process can be given (host_memory.h); smaller ones only by the kernel.
  static constexpr std::size_t kCheckedAllocationBytes = std::size_t{1} << 20;

  explicit HostDevice(Duration stream_wait_timeout = kDefaultStreamWaitTimeout);
  ~HostDevice() override;
  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;

  // How long a blocking stream task (event wait, waitValue) waits before it
  // fails the device. Applies to tasks that start waiting after the call.
  void setStreamWaitTimeout(Duration timeout);
  Duration streamWaitTimeout() const;
  // The run-ahead window, in tasks per stream (at least 1). Applies to later
  // enqueues.
  void setRunAheadWindow(std::size_t tasks);
  std::size_t runAheadWindow() const;

  std::string_view kind() const override { return "host"; }
  std::string describe() const override;  // "host (pid N)"
  bool supports(DeviceFeature f) const override;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) override;
  CheckRecord* allocateCheckRecords(std::size_t n) override;
  void freeCheckRecords(CheckRecord* p) override;

  Stream& defaultStream() override;
  std::unique_ptr<Stream> createStream() override;
  // `native` is nullptr (the default stream) or a `Stream*` obtained from this
  // device (defaultStream(), createStream() or wrapStream()), passed as void*.
  // The result does not own the stream and must not outlive it. Anything
  // else throws UsageError.
  std::unique_ptr<Stream> wrapStream(void* native) override;

  std::unique_ptr<Event> createEvent() override;
  void record(Event& e, Stream& s) override;
  void wait(Stream& s, Event& e) override;
  bool query(Event& e) override;
  void synchronize(Event& e, Duration timeout) override;
  void synchronize(Stream& s, Duration timeout) override;

  void fill(Stream& s, void* dst, DType t, std::size_t count, int64_t value,
            int64_t step) override;
  void copy(Stream& s, void* dst, const void* src, std::size_t bytes) override;
  void check(Stream& s, const void* src, DType t, std::size_t count, int64_t value,
             int64_t step, Tolerance tolerance, CheckRecord* out, int64_t execution) override;
  void launchHostFunc(Stream& s, std::function<void()> fn) override;

  MemoryHandle exportMemory(void* p) override;
  void* importMemory(const MemoryHandle& h) override;
  void closeImported(void* p) override;

  void matmul(Stream& s, const MatmulArgs& args) override;
  void add(Stream& s, void* out, const void* a, const void* b, DType t,
           std::size_t count) override;
  void unary(Stream& s, const UnaryArgs& args) override;
  void fillRandom(Stream& s, void* dst, DType t, std::size_t count,
                  const RandomPattern& pattern) override;
  void checkAgainst(Stream& s, const void* got, DType t, const void* expected, DType et,
                    std::size_t count, Tolerance tolerance, CheckRecord* out,
                    int64_t execution) override;
  void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
              ReduceOp op, std::size_t count) override;

  std::unique_ptr<Event> createTimingEvent() override;
  double elapsedMs(Event& from, Event& to) override;

  void writeValue(Stream& s, uint32_t* addr, uint32_t value) override;
  void waitValue(Stream& s, const uint32_t* addr, uint32_t at_least) override;

  // ipc's message protocol (messages.h).
  DeviceMessages* messages() override { return this; }
  bool supportsCounted() const override { return true; }
  std::size_t inlineFlagsMax() const override;
  void countedStep(Stream& s, const CountedStep& step) override;
  // With inline parts or direct delivery: one stream task doing every part
  // in order (pushes, then pulls); without: DeviceMessages' default.
  void messageStep(Stream& s, const MessageStep& step) override;
  void reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
              ReduceOp op, std::size_t count, const MessageStep& sync) override;

  // Sets the sticky error ("cancelled: <why>"): blocked stream tasks stop
  // waiting, queued ones are skipped, later calls that synchronize throw.
  // A host function already running finishes on its own.
  void cancel(std::string_view why) override;

  // Opaque state (host_device_impl.h); public only so that the device's
  // files and their helpers can name it.
  struct Impl;

 private:
  // reduce, with `sync` or without (null) (host_messages.cc).
  void reduceWith(Stream& s, void* dst, const void* const* srcs, std::size_t sources, DType t,
                  ReduceOp op, std::size_t count, const MessageStep* sync);

  std::unique_ptr<Impl> impl_;
};

// Adds "host" to the device registry (called by the registry itself).
void registerHostDevice();

}  // namespace hir
