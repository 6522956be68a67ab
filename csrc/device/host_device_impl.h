// The host device's internals that its files share (host_device.cc,
// host_device_memory.cc, host_messages.cc): its state (HostDevice::Impl),
// the worker thread of each stream (Worker) and the streams (HostStream).
// Private to device/.
#pragma once

#include <pthread.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/check.h"
#include "device/host_device.h"

namespace hir {

namespace host_device {

using Clock = std::chrono::steady_clock;
using Task = std::function<void()>;

// now + d, saturating: a caller may pass Duration::max() for "very long".
inline Clock::time_point deadlineAfter(Duration d) {
  auto now = Clock::now();
  auto room = std::chrono::duration_cast<Duration>(Clock::time_point::max() - now);
  return d >= room ? Clock::time_point::max() : now + d;
}

class Worker;
class HostStream;
// The worker whose thread is running the current task (null elsewhere).
// Defined in host_device.cc.
extern thread_local const Worker* t_current_worker;

}  // namespace host_device

// ------------------------------------------------------------------- Impl

struct HostDevice::Impl {
  explicit Impl(Duration stream_wait) : stream_wait_ms(stream_wait.count()) {}
  ~Impl();

  // What a wait can wait for (a completion token, a worker's done count,
  // the sticky error, the device closing) is atomic, so a waiter checks it
  // without a lock. A waiter that finds it not ready sleeps on `progress`
  // (waitUntil); whoever changes it calls wake(), which notifies only while
  // someone sleeps (`sleepers`), so that a change nobody waits for costs no
  // system call.
  std::mutex mu;
  std::condition_variable progress;
  std::atomic<int> sleepers{0};
  std::string sticky;  // first failure, guarded by mu
  std::atomic<bool> failed{false};
  // Set when the device is destroyed: a stream task still blocked then can
  // never be released (its peers are gone), so it gives up at once.
  std::atomic<bool> closing{false};

  std::atomic<int64_t> stream_wait_ms;
  std::atomic<std::size_t> window{HostDevice::kDefaultRunAheadWindow};
  std::atomic<uint64_t> next_stream_id{0};
  std::atomic<uint64_t> next_event_id{0};

  // Every live Stream object of this device (owning or wrapper). Held while
  // waiting for all streams, so no stream can be destroyed meanwhile.
  std::mutex streams_mu;
  std::unordered_map<const Stream*, host_device::HostStream*> streams;

  struct Allocation {
    int fd;
    std::size_t size;
  };
  std::mutex mem_mu;
  std::unordered_map<void*, Allocation> allocations;
  std::unordered_map<void*, std::size_t> imported;
  std::unordered_set<CheckRecord*> check_records;

  std::unique_ptr<host_device::HostStream> default_stream;

  Duration streamWait() const { return Duration(stream_wait_ms.load()); }
  // Bytes of the live allocations whose pages were never written: the
  // memory bounds (/proc/meminfo, cgroups) do not count them yet. With
  // mem_mu held.
  std::size_t untouchedLocked() const;

  // Sets the sticky error (the first one wins) and wakes every waiter.
  void fail(const std::string& message) {
    {
      std::lock_guard lock(mu);
      if (failed.load()) return;
      sticky = message;
      failed.store(true);
    }
    progress.notify_all();
  }
  // Wakes every blocked task and makes later ones give up instead of block.
  void shutdown() {
    {
      std::lock_guard lock(mu);
      closing.store(true);
    }
    progress.notify_all();
  }
  // After a change a waiter may be waiting for. Sequentially consistent
  // with waitUntil's count of sleepers: either the waiter sees the change
  // before it sleeps, or this sees the sleeper and wakes it (the lock
  // orders the notify after the sleeper's last check).
  void wake() {
    if (sleepers.load() == 0) return;
    { std::lock_guard lock(mu); }
    progress.notify_all();
  }
  // Waits until `ready()` or `deadline`; returns ready(). It does not
  // spin: the thread that completes the work is usually this rank's only
  // busy one (a lane polling MPI, a worker running a kernel), and a spinner
  // beside it takes a core that a peer rank or the work itself needs. A
  // thread woken from a sleep also runs ahead of the processes that kept
  // their cores meanwhile, where a spinning or yielding one waits for its
  // turn (milliseconds on a loaded machine).
  template <class Ready>
  bool waitUntil(host_device::Clock::time_point deadline, Ready ready) {
    if (ready()) return true;
    std::unique_lock lock(mu);
    sleepers.fetch_add(1);
    const bool ok = progress.wait_until(lock, deadline, ready);
    sleepers.fetch_sub(1);
    return ok;
  }
  // With `mu` held.
  [[noreturn]] void throwSticky() const {
    throw BackendError(fmt::format("host device failed earlier: {}", sticky));
  }

  host_device::HostStream& stream(Stream& s);
  void waitForAllStreams(std::string_view why);
};

// ----------------------------------------------------------------- Worker

namespace host_device {

// One stream's thread: runs its queue in order, sleeps when it is empty.
//
// Run-ahead. The host enqueues far faster than small tasks run: without a
// bound, a loop of many small operations would queue its whole run in
// memory. So each stream queues at most the device's window of tasks
// (kDefaultRunAheadWindow, like the bounded launch queue of a CUDA stream):
// an enqueue from the host that finds the queue full blocks until the worker
// has run it down to half (the host then wakes once per half window, not
// once per task, and does not slow the worker). If the worker takes no task
// for the stream-wait timeout, the device fails (sticky) and the enqueue
// throws TimeoutError naming the stream.
//
// Why this cannot deadlock within one process: the host enqueues in program
// order, and an event wait depends only on work enqueued before it. wait(s,
// e) captures the record of e made by an earlier call, whose task is already
// queued (a record not made yet is not waited for). So the head of a full
// queue waits only for tasks already queued, on this stream or another, each
// of which waits only for tasks queued before it: the earliest waits for
// nothing, and the queue drains without the host, whose blocked enqueue comes
// later in program order than anything queued. Tasks that a worker enqueues
// itself (work that launches work) never block, so a worker never waits for
// room on a stream that waits for it.
// Semaphores (waitValue) and host functions may wait for work enqueued later
// or by another process (ipc, the MPI backend's completions, a peer's host
// that is blocked in turn): a program that queues more than a window of work
// on one stream behind such a wait, before posting what the peer waits for,
// stalls, as it would on a GPU, and the stall ends in a TimeoutError, not a
// hang.
class Worker {
 public:
  Worker(HostDevice::Impl& dev, uint64_t id) : dev_(dev), id_(id) {
    thread_ = std::thread([this] { run(); });
  }
  // Drains: runs everything queued, or after a failure skips it, then joins.
  ~Worker() {
    {
      std::lock_guard lock(queue_mu_);
      stopping_ = true;
    }
    queue_cv_.notify_one();
    thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void enqueue(Task task) {
    if (t_current_worker == nullptr &&
        queued_.load(std::memory_order_relaxed) >= dev_.window.load(std::memory_order_relaxed))
      waitForRoom();
    {
      std::lock_guard lock(queue_mu_);
      queue_.push_back(std::move(task));
      queued_.fetch_add(1);
      enqueued_.fetch_add(1);
    }
    queue_cv_.notify_one();
  }

  uint64_t id() const { return id_; }
  // Tasks enqueued so far; tasks finished or skipped.
  uint64_t enqueued() const { return enqueued_.load(); }
  uint64_t done() const { return done_.load(); }

 private:
  // The host waits for the worker to run a full queue down to half. The
  // worker notifies room_cv_ when it gets there and someone waits; the
  // waiter also looks every 10 ms for a failure (which lets it through:
  // queued work is skipped then) and for progress, which restarts the
  // timeout: it fires only when the worker took no task for that long.
  void waitForRoom() {
    const Duration limit = dev_.streamWait();
    const std::size_t resume_at = dev_.window.load() / 2;
    auto deadline = deadlineAfter(limit);
    uint64_t seen = taken_.load();
    std::unique_lock lock(room_mu_);
    room_waiting_.store(true);
    for (;;) {
      if (queued_.load() <= resume_at || dev_.failed.load() || dev_.closing.load()) break;
      const auto now = Clock::now();
      if (const uint64_t taken = taken_.load(); taken != seen) {
        seen = taken;
        deadline = deadlineAfter(limit);
      } else if (now >= deadline) {
        room_waiting_.store(false);
        const std::string message = fmt::format(
            "host stream {} took no task in {} ms while {} were queued on it (its run-ahead "
            "window is full): the work at its head is stuck, so the host cannot enqueue more",
            id_, limit.count(), queued_.load());
        lock.unlock();
        dev_.fail(message);
        throw TimeoutError(message);
      }
      room_cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(10)));
    }
    room_waiting_.store(false);
  }

  void run() {
    t_current_worker = this;
    std::string name = fmt::format("hir-stream-{}", id_);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    // Sleeps as short as asked (1 us of slack, not Linux's default 50 us):
    // the tasks that poll (MPI requests, a peer's semaphore) sleep a few
    // microseconds between polls while data is still moving.
    prctl(PR_SET_TIMERSLACK, 1000UL);
    for (;;) {
      Task task;
      std::deque<Task> skipped;
      {
        std::unique_lock lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        if (dev_.failed.load()) {
          skipped.swap(queue_);  // after a failure nothing more runs
        } else {
          task = std::move(queue_.front());
          queue_.pop_front();
        }
      }
      const std::size_t taken = task ? 1 : skipped.size();
      // Sequentially consistent, like room_waiting_: either the waiter sees
      // the queue shrink, or this sees the waiter and wakes it.
      queued_.fetch_sub(taken);
      taken_.fetch_add(taken, std::memory_order_relaxed);
      if (room_waiting_.load() && queued_.load() <= dev_.window.load() / 2) {
        std::lock_guard lock(room_mu_);
        room_cv_.notify_one();
      }
      if (task) runTask(task);
      // Release what the tasks captured before they count as done.
      task = nullptr;
      skipped.clear();
      done_.fetch_add(taken);
      dev_.wake();
    }
  }

  // After a failure, work is skipped, as on a GPU after a sticky error.
  void runTask(Task& task) {
    if (dev_.failed.load()) return;
    try {
      task();
    } catch (const std::exception& e) {
      dev_.fail(fmt::format("stream {}: {}", id_, e.what()));
    } catch (...) {
      dev_.fail(fmt::format("stream {}: a task threw an unknown exception", id_));
    }
  }

  HostDevice::Impl& dev_;
  const uint64_t id_;
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), readable without queue_mu_
  std::atomic<uint64_t> taken_{0};      // tasks taken off the queue so far
  std::mutex room_mu_;                  // the host's wait for room
  std::condition_variable room_cv_;
  std::atomic<bool> room_waiting_{false};
  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> done_{0};
  std::thread thread_;  // last: starts after the members above exist
};

// An owning stream (with its worker) or a non-owning wrapper of one.
class HostStream final : public Stream {
 public:
  HostStream(HostDevice::Impl& dev, std::unique_ptr<Worker> owned, Worker* worker)
      : dev_(dev), owned_(std::move(owned)), worker_(worker) {
    std::lock_guard lock(dev_.streams_mu);
    dev_.streams[this] = this;
  }
  ~HostStream() override {
    {
      // Unregister first: waitForAllStreams() holds streams_mu while it
      // reads the worker, so the worker cannot go away under it.
      std::lock_guard lock(dev_.streams_mu);
      dev_.streams.erase(this);
    }
    owned_.reset();  // drains
  }

  HostDevice::Impl& device() const { return dev_; }
  Worker& worker() const { return *worker_; }
  bool owning() const { return owned_ != nullptr; }

 private:
  HostDevice::Impl& dev_;
  std::unique_ptr<Worker> owned_;
  Worker* worker_;
};

}  // namespace host_device

}  // namespace hir
