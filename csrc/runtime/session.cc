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
      settings_(options.settings ? *options.settings : Settings::fromEnvironment()),
      device_(createDevice(options.device, deviceIndex(bootstrap, options), settings_)) {}

Session::Session(std::unique_ptr<Bootstrap> bootstrap, const SessionOptions& options)
    : owned_bootstrap_(std::move(bootstrap)),
      bootstrap_(owned_bootstrap_.get()),
      settings_(options.settings ? *options.settings : Settings::fromEnvironment()),
      device_(createDevice(options.device, deviceIndex(*bootstrap_, options), settings_)) {}

Session::~Session() = default;

int Session::rank() const { return bootstrap_->rank(); }
int Session::world() const { return bootstrap_->world(); }

}  // namespace hir
