// How the host backends (mpi, local) post without blocking the host: host
// functions on streams of their own, ordered by events.
//
//   record(ready, current); wait(start, ready);
//   start stream:       start(), which begins the post's operations once its
//                       inputs are ready, and never waits for a peer
//   record(started, start); wait(lane, started);
//   the post's lane:    complete(), which waits until they are done
//   record(done, lane)
//
// Starts run one at a time, in post order: every rank begins its
// operations in program order (MPI matches a pair's messages and a
// communicator's collectives in the order they start), and as no start waits
// for a peer, sends and recvs posted in any order cannot deadlock. But a
// start does wait for the work enqueued before its post on the posting
// stream, and later starts wait behind it (PostOrder::kStartsInPostOrder).
//
// A start runs at once on the posting thread instead when that keeps both
// orders: nothing is pending on the posting stream (its inputs are ready),
// no earlier start is still queued, and the backend says the start is
// cheap (`inline_ok`: no large copy). The completion then waits for
// nothing but its lane: a small operation waited on the host costs one
// hand-off to the lane's thread and one back, not four.
//
// Completions wait only where the operations imply it. Each post's
// completion runs on the completion stream of its lanes: one per peer and
// direction for a send or recv, one per team for a collective, one per set
// of those for a post of several operations (a group). Within a lane the
// post k+1 cannot complete before post k anyway (its peers started k before
// k+1), so a receive's wait never waits for an unrelated send whose peer is
// not receiving yet. Each lane is a stream (a thread of the host device),
// made on its first post.
//
// A failure of start() or complete() becomes the device's sticky error.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include <hostir/backend.h>
#include <hostir/device.h>

namespace hir {

class HostPostStreams {
 public:
  // The most bytes a start may copy and still run on the posting thread.
  static constexpr std::size_t kInlineStartBytes = std::size_t{64} << 10;

  // The streams and events, on `device` (at the backend's setup()).
  void create(Device& device);
  bool created() const { return start_ != nullptr; }

  // Held across one post: the records and waits of the shared events, and
  // what the backend numbers in post order, stay those of one post.
  [[nodiscard]] std::unique_lock<std::mutex> lock() { return std::unique_lock(mutex_); }

  // Enqueues the post of `ops`, under lock(): `start` after the work
  // enqueued on `current` so far (or runs it now, see above, when
  // `inline_ok`; what it throws then is thrown here), `complete` after
  // `start` on the lane of `ops`, and `done` recorded after `complete`.
  void enqueue(const std::unique_lock<std::mutex>& held, std::span<const PostArgs> ops,
               Stream& current, Event& done, std::function<void()> start,
               std::function<void()> complete, bool inline_ok);

  // At teardown: waits for every stream, one deadline of `timeout` for all.
  // A post that failed or timed out was reported where it happened.
  void drain(Duration timeout) noexcept;
  // Destroys the streams and events (after drain()).
  void reset();

 private:
  // A post's lanes, sorted: peer * 2 (+1 for a recv) for a send or recv,
  // -1 - team for a collective.
  using LaneKey = std::vector<int64_t>;
  static LaneKey laneOf(std::span<const PostArgs> ops);

  Device* device_ = nullptr;
  std::unique_ptr<Stream> start_;
  std::map<LaneKey, std::unique_ptr<Stream>> lanes_;
  std::unique_ptr<Event> ready_, started_;
  // Starts enqueued on start_ and not run yet (one that a failure skipped
  // never counts down: the device has failed, nothing runs inline after).
  std::shared_ptr<std::atomic<int64_t>> queued_starts_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::mutex mutex_;
};

}  // namespace hir
