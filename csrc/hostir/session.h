// A Session is one rank's runtime: its bootstrap, its device and its
// settings. Programs are loaded into Evaluators of a session.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <hostir/device.h>
#include <hostir/bootstrap.h>
#include <hostir/settings.h>

namespace hir {

struct SessionOptions {
  std::string device = "auto";  // "auto", "cuda" or "host"
  int device_index = -1;        // -1: the local rank (cuda)
  // The tuning settings of the session's device and backends
  // (<hostir/settings.h>); unset: Settings::fromEnvironment().
  std::optional<Settings> settings;
};

class Session {
 public:
  // Uses `bootstrap` (not owned, must outlive the session) or owns one given
  // as unique_ptr.
  Session(Bootstrap& bootstrap, const SessionOptions& options = {});
  Session(std::unique_ptr<Bootstrap> bootstrap, const SessionOptions& options = {});
  ~Session();

  Bootstrap& bootstrap() { return *bootstrap_; }
  Device& device() { return *device_; }
  // Resolved once, when the session was made.
  const Settings& settings() const { return settings_; }
  int rank() const;
  int world() const;

 private:
  std::unique_ptr<Bootstrap> owned_bootstrap_;
  Bootstrap* bootstrap_;
  Settings settings_;
  std::unique_ptr<Device> device_;
};

}  // namespace hir
