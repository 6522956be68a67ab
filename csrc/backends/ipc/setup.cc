// The ipc backend's setup (state.h): the signal page's layout (counters,
// direct-delivery marks, eager slots with their line areas), the eager
// slots every rank must agree on, and the settings the protocol reads.
#include <algorithm>

#include "backends/ipc/state.h"
#include "common/log.h"
#include <hostir/bootstrap.h>

namespace hir {

using namespace ipc;

namespace {

// What every rank must have alike for its eager messages to land where its
// peers look, beyond the settings (which every rank has alike,
// BackendContext::settings): what the device and the program made of them.
struct EagerLayout {
  uint64_t lines, slot_bytes, ring;
};

// Every rank has the same eager layout, or setup fails on every rank saying
// which rank differs and in what (an allgather of each rank's layout).
void agreeOnEagerSlots(Bootstrap& boot, const EagerLayout& mine) {
  std::vector<EagerLayout> all(static_cast<std::size_t>(boot.world()));
  boot.allgather(&mine, all.data(), sizeof mine);
  for (int r = 0; r < boot.world(); ++r) {
    const EagerLayout& theirs = all[static_cast<std::size_t>(r)];
    HIR_CHECK_AS(UsageError, theirs.lines == mine.lines,
                 "ipc: eager messages in lines go up to {} bytes on rank {} and up to {} on rank "
                 "{}: HIR_CUDA_KERNEL_COPY_MAX, which bounds them on GPUs, must be the same on "
                 "every rank",
                 mine.lines, boot.rank(), theirs.lines, r);
    HIR_CHECK_AS(ProgramError, theirs.slot_bytes == mine.slot_bytes && theirs.ring == mine.ring,
                 "ipc: rank {} made {} eager slots of {} bytes and rank {} made {} of {}, sized "
                 "for the largest eager send of the program each loaded: every rank must load "
                 "the same program",
                 boot.rank(), mine.ring, mine.slot_bytes, r, theirs.ring, theirs.slot_bytes);
  }
}

}  // namespace

void IpcBackend::setup(const BackendContext& ctx) {
  State& st = *state_;
  HIR_INTERNAL_ASSERT(ctx.device != nullptr && ctx.bootstrap != nullptr,
                      "ipc backend setup without a device or bootstrap");
  HIR_INTERNAL_ASSERT(st.dev == nullptr, "ipc backend set up twice");
  Device& d = *ctx.device;
  Support s = supports(caps(), SupportQuery{d.kind(), CommType::Send});
  HIR_CHECK_AS(BackendError, s.ok, "{}", s.why);
  HIR_CHECK_AS(BackendError,
               d.supports(DeviceFeature::Ipc) && d.supports(DeviceFeature::StreamSemaphore),
               "the ipc backend needs memory export/import and stream semaphores, which device {} "
               "does not offer",
               d.describe());
  st.ctx = ctx;
  st.rank = ctx.bootstrap->rank();
  st.world = ctx.bootstrap->world();
  st.nodes = ctx.bootstrap->nodes();  // collective, like setup itself
  st.dev = &d;
  st.msg = &messagesOf(d, st.generic_msg);
  device_ = &d;
  // The eager slots: the same size and number on every rank, or the
  // messages would land in different places.
  const Settings& set = ctx.settings;
  st.eager_max = ipcEagerMaxBytes(set);
  const IpcEagerSlots slots = ipcEagerSlotsFor(set, ctx.largest_eager_send);
  st.slot_bytes = std::max<std::size_t>(slots.bytes, 16);
  st.eager_slots = std::max<uint32_t>(slots.count, 1);
  // Lines take twice the message's bytes (rounded up to 4), in their
  // slot's line area.
  if (st.eager_max > 0 && st.msg->supportsInline())
    st.inline_max = std::min({ipcInlineMaxBytes(set), st.eager_max, st.msg->inlineFlagsMax()});
  agreeOnEagerSlots(*ctx.bootstrap, EagerLayout{st.inline_max, st.slot_bytes, st.eager_slots});
  HIR_LOG_DEBUG(Subsys::Ipc, "eager slots: {} per sender of {} bytes ({})", st.eager_slots,
                st.slot_bytes,
                ctx.largest_eager_send < 0
                    ? std::string("the program's largest eager send is unknown: "
                                  "HIR_IPC_EAGER_SEND_MAX's size")
                    : fmt::format("the program's largest eager send: {} bytes",
                                  ctx.largest_eager_send));
  st.direct = set.on(Setting::IpcDirect);
  st.push_steps = set.on(Setting::IpcPushSteps);
  const std::size_t counters = static_cast<std::size_t>(st.world) * kSignals * sizeof(uint32_t);
  const std::size_t rows = static_cast<std::size_t>(st.world) * st.eager_slots;
  const std::size_t marks = st.eager_max > 0 ? rows * sizeof(uint32_t) : 0;
  auto aligned = [](std::size_t n) { return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign; };
  st.marks_offset = counters;
  st.slots_offset = aligned(counters + marks);
  st.line_bytes = st.inline_max > 0 ? aligned(inlineLineBytes(st.inline_max)) : 0;
  st.slot_stride = st.slot_bytes + st.line_bytes;
  // Device memory starts zeroed (Device::allocate): no line holds a flag
  // before its first message.
  st.page_bytes = st.slots_offset + (st.eager_max > 0 ? rows * st.slot_stride : 0);
  st.control = d.createStream();
  st.join = d.createStream();
  st.phased.resize(ctx.teams.size());
  st.ready = d.createEvent();
  st.joined = d.createEvent();
  st.peer_pages.assign(static_cast<std::size_t>(st.world), nullptr);
  st.imports.resize(static_cast<std::size_t>(st.world));
  st.wave_load.resize(static_cast<std::size_t>(st.world));
  st.send_lanes.resize(static_cast<std::size_t>(st.world));
  st.recv_lanes.resize(static_cast<std::size_t>(st.world));
  // HIR_IPC_SEQ_START (a test's): message numbers start past it, so that a
  // test reaches the wrap at 2^32 in a few messages.
  st.seq_start = static_cast<uint32_t>(set.get(Setting::IpcSeqStart));
  st.latest = std::make_unique<std::atomic<uint32_t>[]>(static_cast<std::size_t>(st.world));
  st.latest_eager = std::make_unique<std::atomic<uint32_t>[]>(static_cast<std::size_t>(st.world));
  for (int p = 0; p < st.world; ++p) {
    st.latest[static_cast<std::size_t>(p)].store(st.seq_start);
    st.latest_eager[static_cast<std::size_t>(p)].store(st.seq_start);
  }
  for (auto* lanes : {&st.send_lanes, &st.recv_lanes})
    for (Lane& l : *lanes) l.eager = st.seq_start;
  // Device memory (a peer maps it): every counter starts at the number
  // before the first message's, seq_start + 1.
  st.page = static_cast<uint32_t*>(d.allocate(st.page_bytes));
  d.fill(*st.control, st.page, DType::Int32, static_cast<std::size_t>(st.world) * kSignals,
         static_cast<int32_t>(st.seq_start), 0);
  // Counted mode: the lane counters start where the page does; the release
  // word at 0.
  // HIR_IPC_COUNTED=1: counted without graph mode (a test's, so that the
  // host device runs the protocol graphs use).
  st.counted = ctx.graph || set.on(Setting::IpcCounted);
  if (st.counted)
    HIR_CHECK_AS(BackendError, st.msg->supportsCounted(),
                 "ipc in graph mode needs counted semaphores, which device {} does not offer",
                 d.describe());
  if (st.counted || st.inline_max > 0) {
    st.counts = static_cast<uint32_t*>(
        d.allocate((4 * static_cast<std::size_t>(st.world) + 1) * sizeof(uint32_t)));
    d.fill(*st.control, st.counts, DType::Int32, 4 * static_cast<std::size_t>(st.world),
           static_cast<int32_t>(st.seq_start), 0);
    d.fill(*st.control, st.releaseWord(), DType::Int32, 1, 0, 0);
  }
  d.synchronize(*st.control, ctx.timeout);
  HIR_LOG_DEBUG(Subsys::Ipc, "message numbers {}",
                st.counted ? "counted on the device" : "from the host");
}

}  // namespace hir
