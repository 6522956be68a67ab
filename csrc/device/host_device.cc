// The host device (see host_device.h). One file of about 750 lines: one
// implementation of the Device interface, whose streams, events, memory and
// semaphores keep CUDA's semantics together (its compute kernels are in
// compute.cc).
#include "device/host_device.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/elements.h"
#include "common/check.h"
#include "common/log.h"
#include "common/reductions.h"
#include "device/compute.h"
#include "device/host_memory.h"

namespace hir {

namespace {

using Clock = std::chrono::steady_clock;
using Task = std::function<void()>;

std::string errnoText(int err) { return std::system_category().message(err); }

// now + d, saturating: a caller may pass Duration::max() for "very long".
Clock::time_point deadlineAfter(Duration d) {
  auto now = Clock::now();
  auto room = std::chrono::duration_cast<Duration>(Clock::time_point::max() - now);
  return d >= room ? Clock::time_point::max() : now + d;
}

// A completion token: one record() of an event. Guarded by Impl::mu.
struct Completion {
  uint64_t stream_id = 0;  // where it was recorded, for messages
  bool done = false;
  Clock::time_point stamp{};  // when it completed (timing events only)
};

class Worker;
class HostStream;
// The worker whose thread is running the current task (null elsewhere).
thread_local const Worker* t_current_worker = nullptr;

}  // namespace

// ------------------------------------------------------------------- Impl

struct HostDevice::Impl {
  explicit Impl(Duration stream_wait) : stream_wait_ms(stream_wait.count()) {}
  ~Impl();

  // Guards completion tokens, per-worker done counts and the sticky error;
  // `progress` is notified whenever any of them changes.
  std::mutex mu;
  std::condition_variable progress;
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
  std::unordered_map<const Stream*, HostStream*> streams;

  struct Allocation {
    int fd;
    std::size_t size;
  };
  std::mutex mem_mu;
  std::unordered_map<void*, Allocation> allocations;
  std::unordered_map<void*, std::size_t> imported;
  std::unordered_set<CheckRecord*> check_records;

  std::unique_ptr<HostStream> default_stream;

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
  // With `mu` held.
  [[noreturn]] void throwSticky() const {
    throw BackendError(fmt::format("host device failed earlier: {}", sticky));
  }

  HostStream& stream(Stream& s);
  void waitForAllStreams(std::string_view why);
};

// ----------------------------------------------------------------- Worker

namespace {

// One stream's thread: runs its queue in order, sleeps when it is empty.
//
// Run-ahead. The host enqueues far faster than small tasks run: without a
// bound, a loop of a million small allreduces queued its whole run (2.4 GB
// per rank). So each stream queues at most the device's window of tasks
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
  // Tasks enqueued so far; tasks finished or skipped (guarded by dev.mu).
  uint64_t enqueued() const { return enqueued_.load(); }
  uint64_t doneLocked() const { return done_; }

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
      {
        std::lock_guard lock(dev_.mu);
        done_ += taken;
      }
      dev_.progress.notify_all();
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
  uint64_t done_ = 0;  // guarded by dev_.mu
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace

// ------------------------------------------------------- streams, events

namespace {

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

class HostEvent final : public Event {
 public:
  HostEvent(HostDevice::Impl& dev, uint64_t id, bool timing) : dev(dev), id(id), timing(timing) {}
  HostDevice::Impl& dev;
  const uint64_t id;
  const bool timing;  // createTimingEvent(): completions carry their time
  std::shared_ptr<Completion> latest;  // guarded by dev.mu; null: never recorded
};

}  // namespace

HostStream& HostDevice::Impl::stream(Stream& s) {
  auto* hs = dynamic_cast<HostStream*>(&s);
  HIR_CHECK_AS(UsageError, hs != nullptr && &hs->device() == this,
               "host device: the stream was not created by this device");
  return *hs;
}

HostDevice::Impl::~Impl() {
  // Streams the user created must be gone by now; the default stream drains
  // here, its waits giving up (with a sticky error) instead of blocking.
  shutdown();
  default_stream.reset();
  for (auto& [p, a] : allocations) {
    munmap(p, a.size);
    close(a.fd);
  }
  for (auto& [p, size] : imported) munmap(p, size);
  for (CheckRecord* r : check_records) delete[] r;
}

std::size_t HostDevice::Impl::untouchedLocked() const {
  std::size_t untouched = 0;
  for (const auto& [p, a] : allocations) {
    struct stat st {};
    if (fstat(a.fd, &st) != 0) continue;
    // A memfd's blocks are the pages it was given (512-byte units).
    const auto given = static_cast<std::size_t>(st.st_blocks) * 512;
    untouched += a.size > given ? a.size - given : 0;
  }
  return untouched;
}

// Like cudaFree: memory is released only after the work enqueued so far has
// run. A stream task cannot wait for its own stream, so tasks skip this.
void HostDevice::Impl::waitForAllStreams(std::string_view why) {
  if (t_current_worker != nullptr) return;
  std::lock_guard streams_lock(streams_mu);
  // A blocked task gives up after the stream-wait timeout, so twice that
  // bounds this wait; past it something is wrong and we refuse to free.
  Duration wait = streamWait();
  Duration limit = wait >= Duration::max() / 4 ? Duration::max() : wait * 2 + Duration(1000);
  auto deadline = deadlineAfter(limit);
  for (auto& [key, hs] : streams) {
    if (!hs->owning()) continue;
    Worker& w = hs->worker();
    uint64_t target = w.enqueued();
    std::unique_lock lock(mu);
    bool ok = progress.wait_until(lock, deadline, [&] { return w.doneLocked() >= target; });
    HIR_CHECK_AS(TimeoutError, ok,
                 "host wait timed out after {} ms waiting for stream {} to finish before {}",
                 limit.count(), w.id(), why);
  }
}

// -------------------------------------------------------------- HostDevice

HostDevice::HostDevice(Duration stream_wait_timeout)
    : impl_(std::make_unique<Impl>(stream_wait_timeout)) {
  uint64_t id = impl_->next_stream_id.fetch_add(1);
  auto worker = std::make_unique<Worker>(*impl_, id);
  Worker* w = worker.get();
  impl_->default_stream = std::make_unique<HostStream>(*impl_, std::move(worker), w);
}

HostDevice::~HostDevice() = default;

void HostDevice::setStreamWaitTimeout(Duration timeout) {
  impl_->stream_wait_ms.store(timeout.count());
}
Duration HostDevice::streamWaitTimeout() const { return impl_->streamWait(); }

void HostDevice::setRunAheadWindow(std::size_t tasks) {
  impl_->window.store(std::max<std::size_t>(tasks, 1));
}
std::size_t HostDevice::runAheadWindow() const { return impl_->window.load(); }

void HostDevice::cancel(std::string_view why) {
  HIR_LOG_INFO(Subsys::Host, "queued work cancelled: {}", why);
  impl_->fail(fmt::format("cancelled: {}", why));
}

std::string HostDevice::describe() const { return fmt::format("host (pid {})", getpid()); }

bool HostDevice::supports(DeviceFeature f) const {
  switch (f) {
    case DeviceFeature::Ipc: return true;
    case DeviceFeature::StreamSemaphore: return true;
    case DeviceFeature::Compute: return true;
    case DeviceFeature::Timing: return true;
    case DeviceFeature::Graphs: return false;  // no graph of host tasks (yet)
    case DeviceFeature::CountedSemaphore: return true;
    case DeviceFeature::Reduce: return true;
    case DeviceFeature::InlineFlags: return true;
  }
  return false;
}

std::size_t HostDevice::inlineFlagsMax() const { return std::numeric_limits<std::size_t>::max(); }

// ----------------------------------------------------------------- memory

namespace {
// Out of memory (or of address space) at a system call: a RuntimeError like
// the refusal before it; anything else is the device's own failure.
[[noreturn]] void throwAllocationFailure(std::size_t size, const char* call, int err) {
  std::string text =
      fmt::format("host allocate of {}: {} failed: {}", describeBytes(size), call, errnoText(err));
  if (err == ENOMEM || err == ENOSPC || err == EFBIG) throw RuntimeError(text);
  throw BackendError(text);
}
}  // namespace

// memfd + MAP_SHARED: another process of the node can map the same pages
// through /proc/<pid>/fd/<fd> (exportMemory/importMemory). Pages are taken
// when first written, so an allocation the machine cannot hold would map
// fine and end in the kernel's out-of-memory kill when filled: it is refused
// first (RuntimeError, host_memory.h says against what).
void* HostDevice::allocate(std::size_t bytes) {
  std::size_t size = std::max<std::size_t>(bytes, 1);  // zero bytes: still unique
  if (size >= kCheckedAllocationBytes) {
    std::vector<MemoryBound> bounds = hostMemoryBounds();
    {
      std::lock_guard lock(impl_->mem_mu);
      reserveUntouched(bounds, impl_->untouchedLocked());
    }
    const std::string problem = hostAllocationProblem(size, bounds);
    if (!problem.empty()) throw RuntimeError(problem);
  }
  int fd = memfd_create("hostir", MFD_CLOEXEC);
  if (fd < 0) throwAllocationFailure(size, "memfd_create", errno);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    throwAllocationFailure(size, "ftruncate", err);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    throwAllocationFailure(size, "mmap", err);
  }
  std::lock_guard lock(impl_->mem_mu);
  impl_->allocations[p] = {fd, size};
  return p;
}

void HostDevice::deallocate(void* p) {
  if (p == nullptr) return;
  impl_->waitForAllStreams("deallocate");
  std::lock_guard lock(impl_->mem_mu);
  auto it = impl_->allocations.find(p);
  HIR_CHECK_AS(BackendError, it != impl_->allocations.end(),
               "host deallocate: {} is not a live allocation of this device", p);
  munmap(p, it->second.size);
  close(it->second.fd);
  impl_->allocations.erase(it);
}

CheckRecord* HostDevice::allocateCheckRecords(std::size_t n) {
  // new[] runs CheckRecord's initializers: zeros, first_execution = -1.
  auto* records = new CheckRecord[std::max<std::size_t>(n, 1)];
  std::lock_guard lock(impl_->mem_mu);
  impl_->check_records.insert(records);
  return records;
}

void HostDevice::freeCheckRecords(CheckRecord* p) {
  if (p == nullptr) return;
  impl_->waitForAllStreams("freeCheckRecords");
  std::lock_guard lock(impl_->mem_mu);
  HIR_CHECK_AS(BackendError, impl_->check_records.erase(p) == 1,
               "host freeCheckRecords: {} was not allocated by this device",
               static_cast<void*>(p));
  delete[] p;
}

// ---------------------------------------------------------------- streams

Stream& HostDevice::defaultStream() { return *impl_->default_stream; }

std::unique_ptr<Stream> HostDevice::createStream() {
  uint64_t id = impl_->next_stream_id.fetch_add(1);
  HIR_LOG_DEBUG(Subsys::Host, "stream {} created (a worker thread)", id);
  auto worker = std::make_unique<Worker>(*impl_, id);
  Worker* w = worker.get();
  return std::make_unique<HostStream>(*impl_, std::move(worker), w);
}

std::unique_ptr<Stream> HostDevice::wrapStream(void* native) {
  if (native == nullptr)
    return std::make_unique<HostStream>(*impl_, nullptr, &impl_->default_stream->worker());
  // Only pointers we handed out are accepted: look them up before any cast.
  Worker* w = nullptr;
  {
    std::lock_guard lock(impl_->streams_mu);
    auto it = impl_->streams.find(static_cast<const Stream*>(native));
    HIR_CHECK_AS(UsageError, it != impl_->streams.end(),
                 "host device: wrapStream({}) expects nullptr or a Stream* of this device",
                 native);
    w = &it->second->worker();
  }
  return std::make_unique<HostStream>(*impl_, nullptr, w);
}

// ----------------------------------------------------------------- events

namespace {
HostEvent& hostEvent(HostDevice::Impl& dev, Event& e) {
  auto* he = dynamic_cast<HostEvent*>(&e);
  HIR_CHECK_AS(UsageError, he != nullptr && &he->dev == &dev,
               "host device: the event was not created by this device");
  return *he;
}
}  // namespace

std::unique_ptr<Event> HostDevice::createEvent() {
  return std::make_unique<HostEvent>(*impl_, impl_->next_event_id.fetch_add(1), false);
}

std::unique_ptr<Event> HostDevice::createTimingEvent() {
  return std::make_unique<HostEvent>(*impl_, impl_->next_event_id.fetch_add(1), true);
}

void HostDevice::record(Event& e, Stream& s) {
  HostEvent& ev = hostEvent(*impl_, e);
  Worker& w = impl_->stream(s).worker();
  auto token = std::make_shared<Completion>();
  token->stream_id = w.id();
  Impl* dev = impl_.get();
  // Enqueued first: an enqueue that times out (a full run-ahead window)
  // leaves the event's capture as it was.
  w.enqueue([dev, token, timing = ev.timing] {
    const Clock::time_point now = timing ? Clock::now() : Clock::time_point{};
    {
      std::lock_guard lock(dev->mu);
      token->stamp = now;
      token->done = true;
    }
    dev->progress.notify_all();
  });
  std::lock_guard lock(impl_->mu);
  ev.latest = token;
}

void HostDevice::wait(Stream& s, Event& e) {
  HostEvent& ev = hostEvent(*impl_, e);
  Worker& w = impl_->stream(s).worker();
  std::shared_ptr<Completion> token;
  {
    std::lock_guard lock(impl_->mu);
    token = ev.latest;  // the capture at call time
    if (!token || token->done) return;  // nothing to wait for
  }
  Impl* dev = impl_.get();
  uint64_t event_id = ev.id;
  w.enqueue([dev, token, event_id] {
    Duration limit = dev->streamWait();
    std::unique_lock lock(dev->mu);
    dev->progress.wait_until(lock, deadlineAfter(limit), [&] {
      return token->done || dev->failed.load() || dev->closing.load();
    });
    if (token->done || dev->failed.load()) return;  // after a failure: skipped anyway
    HIR_CHECK_AS(BackendError, !dev->closing.load(),
                 "device destroyed while a stream waited for event #{}", event_id);
    throw BackendError(fmt::format(
        "stream wait timed out after {} ms waiting for event #{} (recorded on stream {})",
        limit.count(), event_id, token->stream_id));
  });
}

bool HostDevice::query(Event& e) {
  HostEvent& ev = hostEvent(*impl_, e);
  std::lock_guard lock(impl_->mu);
  if (impl_->failed.load()) impl_->throwSticky();
  return !ev.latest || ev.latest->done;
}

void HostDevice::synchronize(Event& e, Duration timeout) {
  HostEvent& ev = hostEvent(*impl_, e);
  std::unique_lock lock(impl_->mu);
  std::shared_ptr<Completion> token = ev.latest;
  bool ok = impl_->progress.wait_until(lock, deadlineAfter(timeout), [&] {
    return !token || token->done || impl_->failed.load();
  });
  if (impl_->failed.load()) impl_->throwSticky();
  HIR_CHECK_AS(TimeoutError, ok,
               "host wait timed out after {} ms waiting for event #{} (recorded on stream {})",
               timeout.count(), ev.id, token ? token->stream_id : 0);
}

// Like cudaEventElapsedTime: both events must be timing events whose last
// record() has completed (hostir asks only then).
double HostDevice::elapsedMs(Event& from, Event& to) {
  HostEvent& a = hostEvent(*impl_, from);
  HostEvent& b = hostEvent(*impl_, to);
  std::lock_guard lock(impl_->mu);
  if (impl_->failed.load()) impl_->throwSticky();
  for (const HostEvent* ev : {&a, &b}) {
    HIR_INTERNAL_ASSERT(ev->timing, "elapsedMs: event #{} is not a timing event", ev->id);
    HIR_INTERNAL_ASSERT(ev->latest && ev->latest->done, "elapsedMs: event #{} {}", ev->id,
                        ev->latest ? "has not completed" : "was never recorded");
  }
  return std::chrono::duration<double, std::milli>(b.latest->stamp - a.latest->stamp).count();
}

void HostDevice::synchronize(Stream& s, Duration timeout) {
  Worker& w = impl_->stream(s).worker();
  uint64_t target = w.enqueued();
  std::unique_lock lock(impl_->mu);
  bool ok = impl_->progress.wait_until(lock, deadlineAfter(timeout), [&] {
    return w.doneLocked() >= target || impl_->failed.load();
  });
  if (impl_->failed.load()) impl_->throwSticky();
  HIR_CHECK_AS(TimeoutError, ok,
               "host wait timed out after {} ms waiting for stream {} ({} of {} tasks done)",
               timeout.count(), w.id(), w.doneLocked(), target);
}

// ----------------------------------------------------------- data kernels

void HostDevice::fill(Stream& s, void* dst, DType t, std::size_t count, int64_t value,
                      int64_t step) {
  impl_->stream(s).worker().enqueue(
      [=] { fillPattern(dst, t, count, value, step); });
}

void HostDevice::copy(Stream& s, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  impl_->stream(s).worker().enqueue([=] { std::memmove(dst, src, bytes); });
}

namespace {

// What one execution of a check found, before it is merged into the record.
struct CheckFindings {
  uint64_t mismatches = 0;
  int reported = 0;
  int64_t index[CheckRecord::kMaxReported] = {};
  double got[CheckRecord::kMaxReported] = {};
  double expected[CheckRecord::kMaxReported] = {};
};

CheckFindings runCheck(const void* src, DType t, std::size_t count, int64_t value, int64_t step,
                       double tolerance) {
  CheckFindings f;
  for (std::size_t k = 0; k < count; ++k) {
    PatternElement e = patternElement(t, value, step, static_cast<int64_t>(k));
    if (elementMatches(src, t, k, e, tolerance)) continue;
    if (f.reported < CheckRecord::kMaxReported) {
      f.index[f.reported] = static_cast<int64_t>(k);
      f.got[f.reported] = loadAsDouble(src, t, k);
      f.expected[f.reported] = isFloating(t) ? e.f : static_cast<double>(e.i);
      ++f.reported;
    }
    ++f.mismatches;
  }
  return f;
}

// Several streams may check into one record concurrently: counters are
// atomic, and the first failing execution claims the record with a CAS.
// Report slots are reserved one at a time so they never exceed kMaxReported.
void mergeCheck(CheckRecord* out, std::size_t count, const CheckFindings& f,
                int64_t execution) {
  std::atomic_ref<uint64_t>(out->checked).fetch_add(count);
  if (f.mismatches == 0) return;
  std::atomic_ref<uint64_t>(out->mismatches).fetch_add(f.mismatches);
  int64_t first = -1;
  std::atomic_ref<int64_t> first_ref(out->first_execution);
  if (!first_ref.compare_exchange_strong(first, execution) && first != execution) return;
  std::atomic_ref<int32_t> reported(out->reported);
  for (int j = 0; j < f.reported; ++j) {
    int32_t slot = reported.load();
    do {
      if (slot >= CheckRecord::kMaxReported) return;
    } while (!reported.compare_exchange_weak(slot, slot + 1));
    out->index[slot] = f.index[j];
    out->got[slot] = f.got[j];
    out->expected[slot] = f.expected[j];
  }
}

}  // namespace

void HostDevice::check(Stream& s, const void* src, DType t, std::size_t count, int64_t value,
                       int64_t step, double tolerance, CheckRecord* out, int64_t execution) {
  HIR_INTERNAL_ASSERT(out != nullptr, "check without a record");
  impl_->stream(s).worker().enqueue([=] {
    mergeCheck(out, count, runCheck(src, t, count, value, step, tolerance), execution);
  });
}

void HostDevice::launchHostFunc(Stream& s, std::function<void()> fn) {
  HIR_INTERNAL_ASSERT(fn != nullptr, "launchHostFunc with an empty function");
  impl_->stream(s).worker().enqueue(std::move(fn));
}

// ---------------------------------------------------------------- compute

void HostDevice::matmul(Stream& s, const MatmulArgs& args) {
  checkMatmulArgs(args, "host");
  if (args.m == 0 || args.n == 0) return;
  impl_->stream(s).worker().enqueue([args] { hostMatmul(args); });
}

void HostDevice::add(Stream& s, void* out, const void* a, const void* b, DType t,
                     std::size_t count) {
  if (count == 0) return;
  HIR_INTERNAL_ASSERT(out != nullptr && a != nullptr && b != nullptr,
                      "host add of {} elements with a null buffer", count);
  impl_->stream(s).worker().enqueue([=] { hostAdd(out, a, b, t, count); });
}

namespace {

using ReduceSources = std::array<const void*, kMaxReduceSources>;

// Polls *word until (int32_t)(*word - at_least) >= 0, *release != 0 (when
// given) or the device failed; throws after the device's stream wait limit
// (defined with the semaphores below).
void pollValue(HostDevice::Impl* dev, uint32_t* word, uint32_t at_least, uint32_t* release,
               const char* what);
// Inline lines (device.h): writes src's bytes as lines flagged `flag` into
// dst; readLines waits for each line of src to hold `flag` (as pollValue
// waits) and copies its data into dst.
void writeLines(void* dst, const void* src, std::size_t bytes, uint32_t flag);
void readLines(HostDevice::Impl* dev, void* dst, const void* src, std::size_t bytes,
               uint32_t flag, uint32_t* release, const char* what);

// Bytes of each step of a reduce: small enough for the worker's stack and
// its core's cache.
constexpr std::size_t kReduceBlockBytes = 4096;

// dst = srcs[0] op ... op srcs[n-1] one block at a time: the block of every
// source is combined in `scratch` before dst's block is written, so dst may
// be one of the sources.
void hostReduce(void* dst, const ReduceSources& srcs, int n, DType t, ReduceOp op,
                std::size_t count) {
  const std::size_t size = dtypeSize(t);
  const std::size_t block = kReduceBlockBytes / size;
  alignas(16) std::byte scratch[kReduceBlockBytes];
  for (std::size_t first = 0; first < count; first += block) {
    const std::size_t m = std::min(block, count - first);
    const std::size_t offset = first * size;
    std::memcpy(scratch, static_cast<const std::byte*>(srcs[0]) + offset, m * size);
    for (int j = 1; j < n; ++j)
      combineInto(scratch, static_cast<const std::byte*>(srcs[j]) + offset, m, t, op);
    if (op == ReduceOp::Avg) divideBy(scratch, t, m, n);
    std::memcpy(static_cast<std::byte*>(dst) + offset, scratch, m * size);
  }
}

}  // namespace

// With sync: the pushes (messageStep), then one task: the numbers from the
// counters when it runs, the waits, the sources in their slots, the
// reduction, the signals, the counters' advance.
void HostDevice::reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources,
                        DType t, ReduceOp op, std::size_t count, const MessageStep* sync) {
  checkReduceArgs(dst, srcs, sources, count, sync, "host");
  if (count == 0 && sync == nullptr) return;
  ReduceSources from{};
  std::copy(srcs, srcs + sources, from.begin());
  const int n = static_cast<int>(sources);
  if (sync == nullptr)
    return impl_->stream(s).worker().enqueue([=] { hostReduce(dst, from, n, t, op, count); });
  Impl* dev = impl_.get();
  // The pushes first, as messageStep does them (tasks of their own, each
  // signaled before this step waits for any source).
  if (sync->push_count > 0) {
    MessageStep pushes = *sync;
    pushes.pull_count = 0;
    messageStep(s, pushes);
  }
  const std::size_t bytes = count * dtypeSize(t);
  impl_->stream(s).worker().enqueue([=, y = *sync]() mutable {
    // Sources in lines are read out into this worker's scratch, one
    // 16-byte-aligned part per source.
    thread_local std::vector<std::byte> lines_out;
    const std::size_t part = (bytes + 15) / 16 * 16;
    std::array<uint32_t, kMaxReduceSources> v{};
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
      v[j] = y.numbers[j];
      if (y.counters[j] != nullptr)
        v[j] += std::atomic_ref<uint32_t>(*y.counters[j]).load(std::memory_order_relaxed);
      if (y.waits[j] != nullptr)
        pollValue(dev, const_cast<uint32_t*>(y.waits[j]), v[j],
                  const_cast<uint32_t*>(y.release), "reduce");
      if (y.slotted[j])
        from[j] = static_cast<const char*>(from[j]) + (v[j] & (y.slots - 1)) * y.stride;
      if (y.inline_flags[j] && bytes > 0) {
        if (lines_out.size() < kMaxReduceSources * part) lines_out.resize(kMaxReduceSources * part);
        std::byte* mine = lines_out.data() + j * part;
        readLines(dev, mine, from[j], bytes, inlineFlag(v[j]), const_cast<uint32_t*>(y.release),
                  "reduce");
        from[j] = mine;
      }
    }
    if (count > 0) hostReduce(dst, from, n, t, op, count);
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
      if (y.signals[j] != nullptr)
        std::atomic_ref<uint32_t>(*y.signals[j]).store(v[j], std::memory_order_release);
      if (y.counters[j] != nullptr && y.advances[j] != 0)
        std::atomic_ref<uint32_t>(*y.counters[j])
            .store(v[j] - y.numbers[j] + y.advances[j], std::memory_order_relaxed);
    }
  });
}

// -------------------------------------------------------------------- IPC

namespace {

// What a handle carries: the exporter's pid and fd, and the mapped size.
struct WireHandle {
  char magic[8] = {'h', 'i', 'r', 'h', 'o', 's', 't', '1'};
  int64_t pid = 0;
  int64_t fd = 0;
  uint64_t size = 0;
};
constexpr char kHandleMagic[8] = {'h', 'i', 'r', 'h', 'o', 's', 't', '1'};

}  // namespace

MemoryHandle HostDevice::exportMemory(void* p) {
  WireHandle w;
  {
    std::lock_guard lock(impl_->mem_mu);
    auto it = impl_->allocations.find(p);
    HIR_CHECK_AS(BackendError, it != impl_->allocations.end(),
                 "host exportMemory: {} is not the start of an allocation of this device "
                 "(only memory from allocate() can be shared)",
                 p);
    w.pid = getpid();
    w.fd = it->second.fd;
    w.size = it->second.size;
  }
  MemoryHandle h;
  h.bytes.resize(sizeof(WireHandle));
  std::memcpy(h.bytes.data(), &w, sizeof w);
  return h;
}

void* HostDevice::importMemory(const MemoryHandle& h) {
  WireHandle w;
  HIR_CHECK_AS(BackendError,
               h.bytes.size() == sizeof w &&
                   std::memcmp(h.bytes.data(), kHandleMagic, sizeof kHandleMagic) == 0,
               "host importMemory: not a host device memory handle ({} bytes)", h.bytes.size());
  std::memcpy(&w, h.bytes.data(), sizeof w);
  std::string path = fmt::format("/proc/{}/fd/{}", w.pid, w.fd);
  // The fd number could have been reused for another file if the exporter
  // freed the block: make sure it is still one of our memfds.
  char target[256] = {};
  ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
  HIR_CHECK_AS(BackendError, n >= 0,
               "host importMemory: cannot read {}: {} (the exporting process {} must be alive, "
               "on this node and run by the same user)",
               path, errnoText(errno), w.pid);
  HIR_CHECK_AS(BackendError, std::string_view(target).starts_with("/memfd:hostir"),
               "host importMemory: {} is {}, not a hostir allocation (freed by process {}?)",
               path, target, w.pid);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  HIR_CHECK_AS(BackendError, fd >= 0, "host importMemory: cannot open {}: {}", path,
               errnoText(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < w.size) {
    close(fd);
    throw BackendError(fmt::format("host importMemory: {} is smaller than the {} bytes exported",
                                   path, w.size));
  }
  void* p = mmap(nullptr, w.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);  // the mapping keeps the memory alive
  HIR_CHECK_AS(BackendError, p != MAP_FAILED, "host importMemory: mmap of {} failed: {}", path,
               errnoText(err));
  std::lock_guard lock(impl_->mem_mu);
  impl_->imported[p] = w.size;
  return p;
}

void HostDevice::closeImported(void* p) {
  impl_->waitForAllStreams("closeImported");
  std::lock_guard lock(impl_->mem_mu);
  auto it = impl_->imported.find(p);
  HIR_CHECK_AS(BackendError, it != impl_->imported.end(),
               "host closeImported: {} was not returned by importMemory", p);
  munmap(p, it->second);
  impl_->imported.erase(it);
}

// ------------------------------------------------------ stream semaphores

void HostDevice::writeValue(Stream& s, uint32_t* addr, uint32_t value) {
  HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(addr) % alignof(uint32_t) == 0,
                      "writeValue: misaligned address {}", static_cast<void*>(addr));
  impl_->stream(s).worker().enqueue(
      [addr, value] { std::atomic_ref<uint32_t>(*addr).store(value, std::memory_order_release); });
}

namespace {

// Polls `seen()` until `ready(value)`: the writer may be another process,
// so there is nothing to notify. Ends early when `release` (may be null)
// becomes non-zero or the device failed; throws once the device closes or
// its stream wait limit passes. `what` names the call in errors and
// `awaited` what it waits for ("waiting for >= 5").
template <class Seen, class Ready>
void pollUntil(HostDevice::Impl* dev, const void* at, Seen seen, Ready ready, uint32_t* release,
               const char* what, std::string_view awaited) {
  Duration limit = dev->streamWait();
  auto deadline = deadlineAfter(limit);
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    const auto value = seen();
    if (ready(value) || dev->failed.load()) return;
    if (release != nullptr && std::atomic_ref<uint32_t>(*release).load(std::memory_order_acquire))
      return;
    HIR_CHECK_AS(BackendError, !dev->closing.load(), "device destroyed while {}({}) saw {}, {}",
                 what, at, value, awaited);
    HIR_CHECK_AS(BackendError, Clock::now() < deadline,
                 "stream wait timed out after {} ms: {}({}) saw {}, {}", limit.count(), what, at,
                 value, awaited);
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}

// Waits until *word >= at_least, compared cyclically, (int32)(value -
// at_least) >= 0, as CUDA's GEQ; the rest as pollUntil.
void pollValue(HostDevice::Impl* dev, uint32_t* word, uint32_t at_least, uint32_t* release,
               const char* what) {
  std::atomic_ref<uint32_t> value(*word);
  // Checked before anything is formatted: the usual case.
  if (static_cast<int32_t>(value.load(std::memory_order_acquire) - at_least) >= 0) return;
  pollUntil(
      dev, word, [&] { return value.load(std::memory_order_acquire); },
      [&](uint32_t seen) { return static_cast<int32_t>(seen - at_least) >= 0; }, release, what,
      fmt::format("waiting for >= {}", at_least));
}

}  // namespace

void HostDevice::waitValue(Stream& s, const uint32_t* addr, uint32_t at_least) {
  HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(addr) % alignof(uint32_t) == 0,
                      "waitValue: misaligned address {}", static_cast<const void*>(addr));
  Impl* dev = impl_.get();
  // atomic_ref needs a non-const object; the task only loads through it.
  auto* word = const_cast<uint32_t*>(addr);
  impl_->stream(s).worker().enqueue(
      [dev, word, at_least] { pollValue(dev, word, at_least, nullptr, "waitValue"); });
}

namespace {

void writeLines(void* dst, const void* src, std::size_t bytes, uint32_t flag) {
  auto* line = static_cast<uint64_t*>(dst);
  const auto* from = static_cast<const char*>(src);
  for (std::size_t w = 0; w * 4 < bytes; ++w) {
    uint32_t word = 0;
    std::memcpy(&word, from + w * 4, std::min<std::size_t>(4, bytes - w * 4));
    std::atomic_ref<uint64_t>(line[w]).store(uint64_t{flag} << 32 | word,
                                             std::memory_order_release);
  }
}

void readLines(HostDevice::Impl* dev, void* dst, const void* src, std::size_t bytes,
               uint32_t flag, uint32_t* release, const char* what) {
  auto* line = static_cast<uint64_t*>(const_cast<void*>(src));
  auto* to = static_cast<char*>(dst);
  for (std::size_t w = 0; w * 4 < bytes; ++w) {
    std::atomic_ref<uint64_t> at(line[w]);
    uint64_t seen = at.load(std::memory_order_acquire);
    // The flag must be equal (an earlier lap's or none is smaller, or 0):
    // the slot's next message waits for this one to be read.
    auto flagged = [flag](uint64_t x) { return static_cast<uint32_t>(x >> 32) == flag; };
    if (!flagged(seen))
      pollUntil(
          dev, &line[w],
          [&] {
            seen = at.load(std::memory_order_acquire);
            return seen;
          },
          flagged, release, what, fmt::format("waiting for a line flagged {}", flag));
    const auto word = static_cast<uint32_t>(seen);
    std::memcpy(to + w * 4, &word, std::min<std::size_t>(4, bytes - w * 4));
  }
}

// One part of a messageStep as a stream task does it (device.h).
void runPart(HostDevice::Impl* dev, const MessageStep& m, const MessageStep::Copy& c, bool push) {
  auto* release = const_cast<uint32_t*>(m.release);
  uint32_t v = c.number;
  if (c.counter != nullptr) v += std::atomic_ref<uint32_t>(*c.counter).load(std::memory_order_relaxed);
  // Direct delivery (device.h): the pull resets its mark and posts; the
  // push goes direct when it sees the post, the pull when it sees the mark.
  const bool asks = asksDirect(c, push);
  uint32_t* mark = asks ? c.mark + (c.slotted ? v & (m.slots - 1) : 0) : nullptr;
  const bool posts = asks && !push;
  if (posts) {
    std::atomic_ref<uint32_t>(*mark).store(directMarkReset(v), std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(*c.posted).store(v, std::memory_order_release);
  }
  bool direct = asks && push &&
                static_cast<int32_t>(
                    std::atomic_ref<uint32_t>(*c.posted).load(std::memory_order_acquire) - v) >= 0;
  if (c.wait != nullptr && !direct)
    pollValue(dev, const_cast<uint32_t*>(c.wait), v - c.wait_back, release, "messageStep");
  if (posts) direct = std::atomic_ref<uint32_t>(*mark).load(std::memory_order_acquire) == v;
  const std::size_t slot = c.slotted ? (v & (m.slots - 1)) * m.stride : 0;
  char* dst = direct && push ? static_cast<char*>(c.direct)
                             : static_cast<char*>(c.dst) + (push ? slot : 0);
  const char* src = static_cast<const char*>(c.src) + (push ? 0 : slot);
  if (c.inline_flags && push)
    writeLines(dst, src, c.bytes, inlineFlag(v));
  else if (c.inline_flags)
    readLines(dev, dst, src, c.bytes, inlineFlag(v), release, "messageStep");
  else if (c.bytes > 0 && !(direct && !push))
    std::memmove(dst, src, c.bytes);
  if (direct && push) std::atomic_ref<uint32_t>(*mark).store(v, std::memory_order_relaxed);
  if (c.signal != nullptr)
    std::atomic_ref<uint32_t>(*c.signal).store(v, std::memory_order_release);
  if (c.counter != nullptr && c.advance != 0)
    std::atomic_ref<uint32_t>(*c.counter)
        .store(v - c.number + c.advance, std::memory_order_relaxed);
}

}  // namespace

// Parts in lines or with direct delivery: one stream task (runPart each);
// else Device's default.
void HostDevice::messageStep(Stream& s, const MessageStep& m) {
  bool own = false;
  for (std::size_t k = 0; k < m.push_count; ++k)
    own = own || m.pushes[k].inline_flags || asksDirect(m.pushes[k], true);
  for (std::size_t k = 0; k < m.pull_count; ++k)
    own = own || m.pulls[k].inline_flags || asksDirect(m.pulls[k], false);
  if (!own) return Device::messageStep(s, m);
  HIR_INTERNAL_ASSERT(m.push_count <= m.pushes.size() && m.pull_count <= m.pulls.size(),
                      "messageStep: {} pushes and {} pulls", m.push_count, m.pull_count);
  Impl* dev = impl_.get();
  impl_->stream(s).worker().enqueue([dev, m] {
    for (std::size_t k = 0; k < m.push_count; ++k) runPart(dev, m, m.pushes[k], true);
    for (std::size_t k = 0; k < m.pull_count; ++k) runPart(dev, m, m.pulls[k], false);
  });
}

// One stream task: v from the counter when it runs, the wait, the copy (of
// slot v % slots with a ring), the signal, then the counter's advance.
void HostDevice::countedStep(Stream& s, const CountedStep& step) {
  HIR_INTERNAL_ASSERT(step.counter != nullptr, "countedStep without a counter");
  for (const void* a : {static_cast<const void*>(step.counter),
                        static_cast<const void*>(step.wait_addr),
                        static_cast<const void*>(step.release),
                        static_cast<const void*>(step.signal_addr)})
    HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(a) % alignof(uint32_t) == 0,
                        "countedStep: misaligned address {}", a);
  HIR_INTERNAL_ASSERT((step.slots & (step.slots - 1)) == 0,
                      "countedStep: {} slots is not a power of two", step.slots);
  Impl* dev = impl_.get();
  impl_->stream(s).worker().enqueue([dev, step] {
    std::atomic_ref<uint32_t> c(*step.counter);
    const uint32_t base = c.load(std::memory_order_relaxed), v = base + step.offset;
    if (step.wait_addr != nullptr)
      pollValue(dev, const_cast<uint32_t*>(step.wait_addr), v - step.wait_back,
                const_cast<uint32_t*>(step.release), "countedStep");
    const std::size_t slot = step.slots > 0 ? v & (step.slots - 1) : 0;
    if (step.bytes > 0)
      std::memmove(static_cast<char*>(step.dst) + slot * step.dst_stride,
                   static_cast<const char*>(step.src) + slot * step.src_stride, step.bytes);
    if (step.signal_addr != nullptr)
      std::atomic_ref<uint32_t>(*step.signal_addr).store(v, std::memory_order_release);
    if (step.advance != 0) c.store(base + step.advance, std::memory_order_relaxed);
  });
}

// --------------------------------------------------------------- registry

void registerHostDevice() {
  registerDevice(DeviceInfo{
      "host",
      [](std::string*) { return true; },
      [](int, const Settings&) -> std::unique_ptr<Device> {
        return std::make_unique<HostDevice>();
      },
  });
}

}  // namespace hir
