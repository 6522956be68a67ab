#include <hostir/session.h>

#include "common/check.h"

namespace hir {

namespace {
int deviceIndex(const Bootstrap& b, const SessionOptions& o) {
  return o.device_index >= 0 ? o.device_index : b.localRank();
}
}  // namespace

// Destroyed in reverse order: the device before the bootstrap it may use.
struct Session::State {
  std::unique_ptr<Bootstrap> owned_bootstrap;
  Bootstrap* bootstrap = nullptr;
  Settings settings;
  std::unique_ptr<Device> device;
};

Session::Session(Bootstrap& bootstrap, const SessionOptions& options)
    : state_(std::make_shared<State>()) {
  state_->bootstrap = &bootstrap;
  state_->settings = options.settings ? *options.settings : Settings::fromEnvironment();
  state_->device = createDevice(options.device, deviceIndex(bootstrap, options), state_->settings);
}

Session::Session(std::unique_ptr<Bootstrap> bootstrap, const SessionOptions& options)
    : state_(std::make_shared<State>()) {
  state_->owned_bootstrap = std::move(bootstrap);
  state_->bootstrap = state_->owned_bootstrap.get();
  state_->settings = options.settings ? *options.settings : Settings::fromEnvironment();
  state_->device =
      createDevice(options.device, deviceIndex(*state_->bootstrap, options), state_->settings);
}

Session::~Session() = default;

Bootstrap& Session::bootstrap() { return *state_->bootstrap; }
Device& Session::device() { return *state_->device; }
const Settings& Session::settings() const { return state_->settings; }
int Session::rank() const { return state_->bootstrap->rank(); }
int Session::world() const { return state_->bootstrap->world(); }

}  // namespace hir
