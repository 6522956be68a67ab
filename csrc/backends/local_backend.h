// The local backend: collectives and send/recv on host memory among ranks
// that are threads of one process (createThreadBootstraps, and
// createSelfBootstrap's world of one), without MPI. It handles what the mpi
// backend handles (every communication type, dtype and reduce op) with the
// same arithmetic, and the same asynchronous contract.
//
// The ranks of a world share a hub (made once at setup and handed round
// through the bootstrap): per team, the k-th collective of every member
// meets in one rendezvous slot, and per ordered pair of ranks, the k-th send
// meets the k-th recv. A post never blocks the host: it goes through the
// start stream and completion lanes of backends/host_post.h, where
//
//   start:      a host function deposits the post's ops in their slots;
//               whoever completes a slot moves the data for every member
//               at once, then marks their ops done
//   completion: a host function waits for this rank's ops to be done (the
//               backend timeout and a grace; abort() wakes it)
//
// A deposit never waits for a peer, so sends and recvs posted in any order
// cannot deadlock; deposits run one at a time in post order, and a send
// completes only once its recv is deposited (PostOrder::kStartsInPostOrder,
// as mpi). A rank that gives up on a post
// (its timeout, abort()) fails the slots it was waiting in, so that their
// other members fail at once with its reason instead of waiting for their
// own timeouts, and no member's memory is written after it gave up.
#pragma once

#include <memory>

#include <hostir/backend.h>

namespace hir {

class LocalBackend final : public Backend {
 public:
  LocalBackend();
  ~LocalBackend() override;

  std::string_view name() const override { return "local"; }
  // Collective over the world (one broadcast and one barrier through the
  // bootstrap, which must say RankSpace::Threads).
  void setup(const BackendContext& ctx) override;
  void post(std::span<const PostArgs> ops, Stream& current, Event& done) override;
  // This rank gives up its pending posts (and fails their slots); starts not
  // yet run are skipped, later posts throw. Any thread, more than once.
  void abort() override;

  // Host device, ranks as threads; every communication type, dtype and
  // reduce op.
  static BackendCaps caps();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Adds "local" to the backend registry (auto priority 5, below mpi: the two
// never run with the same bootstrap). The registry calls it on first use.
void registerLocalBackend();

}  // namespace hir
