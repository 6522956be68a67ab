// The generic message protocol (messages.h): DeviceMessages' defaults over
// a device's public calls, and messagesOf().
#include "device/messages.h"

#include <array>
#include <memory>

#include "common/check.h"
#include "device/compute.h"

namespace hir {

namespace {

// The generic protocol of a device without its own (Device::messages()
// null): every default of DeviceMessages.
class GenericMessages final : public DeviceMessages {
 public:
  explicit GenericMessages(Device& d) : DeviceMessages(d) {}
};

}  // namespace

DeviceMessages& messagesOf(Device& d, std::unique_ptr<DeviceMessages>& generic) {
  if (DeviceMessages* own = d.messages()) return *own;
  generic = std::make_unique<GenericMessages>(d);
  return *generic;
}

void DeviceMessages::signaledCopy(Stream& s, void* dst, const void* src, std::size_t bytes,
                                  const uint32_t* wait_addr, uint32_t at_least,
                                  uint32_t* signal_addr, uint32_t value) {
  device().waitValue(s, wait_addr, at_least);
  device().copy(s, dst, src, bytes);
  device().writeValue(s, signal_addr, value);
}

void DeviceMessages::countedStep(Stream&, const CountedStep&) {
  throw BackendError(fmt::format("device '{}' does not support counted semaphores "
                                 "(countedStep called)",
                                 device().kind()));
}

void DeviceMessages::messageStep(Stream& s, const MessageStep& m) {
  Device& d = device();
  auto one = [&](const MessageStep::Copy& c, bool push) {
    HIR_INTERNAL_ASSERT(!c.inline_flags,
                        "messageStep: a {} with inline flags on {}, which does not offer them",
                        push ? "push" : "pull", d.describe());
    if (c.counter == nullptr) {
      HIR_INTERNAL_ASSERT(!c.slotted, "messageStep: a host-numbered {} into a ring",
                          push ? "push" : "pull");
      if (c.wait != nullptr && c.signal != nullptr)
        return signaledCopy(s, c.dst, c.src, c.bytes, c.wait, c.number - c.wait_back, c.signal,
                            c.number);
      if (c.wait != nullptr) d.waitValue(s, c.wait, c.number - c.wait_back);
      if (c.bytes > 0) d.copy(s, c.dst, c.src, c.bytes);
      if (c.signal != nullptr) d.writeValue(s, c.signal, c.number);
      return;
    }
    countedStep(s, countedStepOf(m, c, push));
  };
  for (std::size_t k = 0; k < m.push_count; ++k) one(m.pushes[k], true);
  for (std::size_t k = 0; k < m.pull_count; ++k) one(m.pulls[k], false);
}

// The numbers are the host's (no counter), so each source's slot is known
// here; the device's waits and writes order the sources around its reduce.
void DeviceMessages::reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources,
                            DType t, ReduceOp op, std::size_t count, const MessageStep& sync) {
  Device& d = device();
  checkReduceArgs(dst, srcs, sources, count, &sync, d.kind());
  if (sync.push_count > 0) {
    MessageStep pushes = sync;
    pushes.pull_count = 0;
    messageStep(s, pushes);
  }
  std::array<const void*, kMaxReduceSources> from{};
  for (std::size_t j = 0; j < sources; ++j) {
    HIR_INTERNAL_ASSERT(sync.counters[j] == nullptr && !sync.inline_flags[j],
                        "reduce: source {} {} on {}, which does not offer it", j,
                        sync.inline_flags[j] ? "in lines" : "counted", d.describe());
    const uint32_t v = sync.numbers[j];
    if (sync.waits[j] != nullptr) d.waitValue(s, sync.waits[j], v);
    from[j] = srcs[j];
    if (sync.slotted[j])
      from[j] = static_cast<const char*>(srcs[j]) + (v & (sync.slots - 1)) * sync.stride;
  }
  if (count > 0) d.reduce(s, dst, from.data(), sources, t, op, count);
  for (std::size_t j = 0; j < sources; ++j)
    if (sync.signals[j] != nullptr) d.writeValue(s, sync.signals[j], sync.numbers[j]);
}

}  // namespace hir
