// How the host backends (mpi, local) post without blocking the host: two
// host functions on two streams of their own, ordered by events.
//
//   record(ready, current); wait(start, ready);
//   start stream:      start(), which begins the post's operations once its
//                      inputs are ready, and never waits for a peer
//   record(started, start); wait(completion, started);
//   completion stream: complete(), which waits until they are done
//   record(done, completion)
//
// Starts run one at a time, in post order: every rank begins its
// operations in program order, and as no start waits for a peer, sends and
// recvs posted in any order cannot deadlock. A failure of start() or
// complete() becomes the device's sticky error.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include <hostir/device.h>

namespace hir {

class HostPostStreams {
 public:
  // The streams and events, on `device` (at the backend's setup()).
  void create(Device& device);
  bool created() const { return start_ != nullptr; }

  // Held across one post: the records and waits of the shared events, and
  // what the backend numbers in post order, stay those of one post.
  [[nodiscard]] std::unique_lock<std::mutex> lock() { return std::unique_lock(mutex_); }

  // Enqueues one post, under lock(): `start` after the work enqueued on
  // `current` so far, `complete` after `start`, and `done` recorded after
  // `complete`.
  void enqueue(const std::unique_lock<std::mutex>& held, Stream& current, Event& done,
               std::function<void()> start, std::function<void()> complete);

  // At teardown: waits for both streams, one deadline of `timeout` for the
  // two. A post that failed or timed out was reported where it happened.
  void drain(Duration timeout) noexcept;
  // Destroys the streams and events (after drain()).
  void reset();

 private:
  Device* device_ = nullptr;
  std::unique_ptr<Stream> start_, completion_;
  std::unique_ptr<Event> ready_, started_;
  std::mutex mutex_;
};

}  // namespace hir
