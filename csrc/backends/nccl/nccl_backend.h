// The NCCL backend: GPU collectives and send/recv on the "cuda" device.
//
// - setup(): the world communicator (rank 0 makes the unique id, the bootstrap
//   broadcasts it), then one ncclCommSplit of it per further team, in team
//   order on every rank (a team equal to an earlier one reuses its
//   communicator). Communicator rank == team rank. Unless the environment
//   sets NCCL_NVLS_ENABLE, it is set to 0 first: hostir never uses NVLink
//   multicast.
// - post(): records an event on the caller's stream and makes the backend's
//   own stream wait on it (never a host synchronization), enqueues the ops on
//   the backend stream (an NCCL group when there are several), and records
//   `done` there. gather, scatter and alltoall are grouped ncclSend/ncclRecv
//   (each in its own nested group), the own chunk a send/recv to self.
//   The record + wait is skipped when the caller stream is one of hostir's
//   own (tracked, see device/cuda_interop.h) and nothing but stream waits on
//   this backend's completions reached it since the last join: back-to-back
//   communications then cost no extra event round trip between the streams.
//   HIR_NCCL_ALWAYS_JOIN=1 disables the skip.
//   An input that overlaps the output other than in NCCL's in-place layout is
//   first copied to a scratch buffer of the backend (kept, grown on demand,
//   freed at destruction).
// - abort(): ncclCommAbort on every communicator, from any thread: kernels
//   blocked on a peer return (so do NCCL calls blocked behind them); later
//   posts throw. The evaluator calls it when a run fails or its watchdog
//   finds the host stuck.
// - Communicators are blocking (config.blocking = 1): an init a peer never
//   joins is bounded by the evaluator's watchdog, not here.
// - Destruction waits (with the setup timeout, one deadline) for the backend
//   stream, then destroys the communicators, which NCCL treats as an
//   intra-node collective: every rank must destroy its backend. If the
//   stream does not drain, or after abort(), the communicators are aborted
//   instead and nothing is waited for.
//
// Destroy the backend before its device and before the bootstrap.
#pragma once

#include <memory>

#include <hostir/backend.h>

namespace hir {

class NcclBackend final : public Backend {
 public:
  NcclBackend();
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  std::string_view name() const override { return "nccl"; }
  void setup(const BackendContext& ctx) override;
  void post(std::span<const PostArgs> ops, Stream& current, Event& done) override;
  // Enqueues the NCCL calls on `current` itself; always true.
  bool postJoined(std::span<const PostArgs> ops, Stream& current, Event& done) override;
  // Backend::wait, plus bookkeeping that lets the next post skip a redundant
  // join of the same stream. `done` must be an event of this backend's posts.
  // A host wait also asks the communicators for asynchronous errors every
  // 20 ms (ncclCommGetAsyncError): a peer that died ends it at once.
  void wait(Event& done, Stream& current, WaitMode mode, Duration timeout) override;
  // ncclCommAbort on every communicator; any thread (the evaluator's
  // watchdog calls it while the posting thread may be blocked in NCCL).
  void abort() override;
  void setCapturing(bool capturing) override;
  void* allocateSymmetric(std::size_t bytes, std::span<const int> teams) override;

  // "cuda" device only; every communication type, dtype and reduce op.
  static BackendCaps caps();

 private:
  void hostWait(Event& done, Duration timeout);

  // NCCL and CUDA objects live in State so that this header needs neither.
  struct State;
  std::unique_ptr<State> state_;
};

// Adds "nccl" to the backend registry (auto priority 10). The registry calls
// it on first use.
void registerNcclBackend();

}  // namespace hir
