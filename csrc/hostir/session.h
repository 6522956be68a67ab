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

// Evaluators made of a session keep its device, settings and owned
// bootstrap alive: destroying the Session first is allowed, and the
// Evaluator goes on working until it is destroyed (a Bootstrap given by
// reference must outlive both).
class Session {
 public:
  // Uses `bootstrap` (not owned, must outlive the session and its
  // evaluators) or owns one given as unique_ptr.
  Session(Bootstrap& bootstrap, const SessionOptions& options = {});
  Session(std::unique_ptr<Bootstrap> bootstrap, const SessionOptions& options = {});
  ~Session();

  Bootstrap& bootstrap();
  Device& device();
  // Resolved once, when the session was made.
  const Settings& settings() const;
  int rank() const;
  int world() const;

 private:
  friend class Evaluator;  // keeps the state alive
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace hir
