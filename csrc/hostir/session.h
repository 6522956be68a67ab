// A Session is one rank's runtime: its bootstrap and its device. Programs are
// loaded into Evaluators of a session.
#pragma once

#include <memory>
#include <string>

#include <hostir/device.h>
#include <hostir/bootstrap.h>

namespace hir {

struct SessionOptions {
  std::string device = "auto";  // "auto", "cuda" or "host"
  int device_index = -1;        // -1: the local rank (cuda)
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
  int rank() const;
  int world() const;

 private:
  std::unique_ptr<Bootstrap> owned_bootstrap_;
  Bootstrap* bootstrap_;
  std::unique_ptr<Device> device_;
};

}  // namespace hir
