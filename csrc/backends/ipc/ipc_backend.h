// The ipc backend: send/recv through peer-mapped memory and stream
// semaphores, written once over the Device interface (exportMemory,
// importMemory, copy, writeValue, waitValue), so that it runs on the host
// device (shared memory, worker threads) and on the cuda device (CUDA IPC,
// copy engines, cuStreamWriteValue32/WaitValue32) alike. docs/ipc.md tells
// the whole story; in short:
//
// - shareMemHandles() is the only place ranks talk on the host: one batched
//   exchange through the bootstrap of the memory handles the listed
//   communications need, and of each rank's signal page. Posts never
//   exchange anything.
// - Each rank owns a signal page of world x 6 uint32 counters in device
//   memory, then eager slots. Rank w writes into rank o's page at
//   [w * 6 + kind]; o waits on its own page. Counters carry
//   PostArgs::pair_seq (increasing forever, the same number on both sides),
//   so nothing is ever reset.
// - Put: the receiver signals "free", the sender copies into the receiver's
//   buffer and signals "done". Get: the sender signals "ready", the
//   receiver copies from the sender's buffer and signals "consumed". Eager
//   (auto's choice for small messages): the sender copies into a slot of
//   the receiver's page (free since the message that used it before) and
//   signals "done"; the receiver copies it out and signals "free": no
//   round trip per message.
// - One lane per (peer, direction), with a stream of its own: a message
//   waits only for the earlier messages of its own ordered pair, so any
//   program whose sends and recvs match in order (which the schedule check
//   guarantees) cannot deadlock, whatever order ranks post them in.
// - A post waited for right away (postJoined) runs on the poster's stream
//   instead, without the hand-offs to the lane's stream and back: first
//   every signal of the non-copying sides, then the copies, then the
//   remaining waits, so a ring posted as one group cannot deadlock either.
//   Lanes stay in order across streams (an event per lane).
// - Collectives (allgather, broadcast, alltoall, allreduce, reduce_scatter)
//   are messages of the same protocol between the team's members, listed by
//   ipcCollectiveMessages (collectives.h), plus a local part: a copy of
//   the member's own chunk, or one Device::reduce of the peers' buffers
//   (read where they are, after their "ready", before "consumed"), or of
//   the member's own eager slots that they wrote (after "done", before
//   "free"). A group of more small collectives than slots runs in waves.
// - Teardown needs no peer: once this rank's communications completed, the
//   protocol guarantees that no peer touches its memory any more. After an
//   abort (a failed run), nothing is waited for and nothing is freed.
#pragma once

#include <memory>

#include <hostir/backend.h>

namespace hir {

namespace ipc {
struct State;
}

class IpcBackend final : public Backend {
 public:
  IpcBackend();
  ~IpcBackend() override;

  std::string_view name() const override { return "ipc"; }
  // Collective (Bootstrap::nodes()); allocates and zeroes the signal page.
  void setup(const BackendContext& ctx) override;
  // Send/recv, each with PostArgs::remote (the evaluator fills it), and
  // collectives, each with PostArgs::pieces (its messages, as
  // ipcCollectiveMessages lists them, with their peers' ends); every peer
  // needs a completed exchange. A post with a collective runs its phases
  // on a stream of the backend's.
  void post(std::span<const PostArgs> ops, Stream& current, Event& done) override;
  // Runs the protocol on `current` (see above); always true.
  bool postJoined(std::span<const PostArgs> ops, Stream& current, Event& done) override;
  // Collective over the world, on every rank even with no items.
  void shareMemHandles(std::span<const ShareItem> items) override;
  // Releases this rank's own semaphore waits (every counter of its signal
  // page to 2^30 past the latest message number, and in counted mode the
  // release word, on the host and cuda devices alike: a GPU stream blocked
  // in cuStreamWaitValue32 or in a copy or counted kernel drains);
  // later posts throw, and teardown waits for nothing and leaks the page
  // and the mappings (peers may still write into them). Any thread.
  void abort() override;
  // Forgets where each lane's last messages ran (their events were recorded
  // before the capture, or inside it). Graph mode counts the message numbers
  // on the device (BackendContext::graph), so a replay numbers on.
  void setCapturing(bool capturing) override;

  // host or cuda device; send and recv; any dtype; peers on this node only.
  static BackendCaps caps();

  // Exchanges through the bootstrap so far (for tests).
  int64_t exchanges() const;
  // The eager slots setup() made: their bytes, and how many each sender has
  // in a receiver's page (for tests).
  std::size_t eagerSlotBytes() const;
  uint32_t eagerSlots() const;

 private:
  std::unique_ptr<ipc::State> state_;
};

// Adds "ipc" to the backend registry: auto priority 0, below mpi and nccl,
// so "auto" never picks it; maps_peer_memory is set.
void registerIpcBackend();

}  // namespace hir
