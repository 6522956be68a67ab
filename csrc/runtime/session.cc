#include <hostir/session.h>

#include "common/check.h"

namespace hir {

namespace {
int deviceIndex(const Bootstrap& b, const SessionOptions& o) {
  return o.device_index >= 0 ? o.device_index : b.localRank();
}
}  // namespace

Session::Session(Bootstrap& bootstrap, const SessionOptions& options)
    : bootstrap_(&bootstrap),
      device_(createDevice(options.device, deviceIndex(bootstrap, options))) {}

Session::Session(std::unique_ptr<Bootstrap> bootstrap, const SessionOptions& options)
    : owned_bootstrap_(std::move(bootstrap)),
      bootstrap_(owned_bootstrap_.get()),
      device_(createDevice(options.device, deviceIndex(*bootstrap_, options))) {}

Session::~Session() = default;

int Session::rank() const { return bootstrap_->rank(); }
int Session::world() const { return bootstrap_->world(); }

}  // namespace hir
