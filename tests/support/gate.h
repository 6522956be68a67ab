// Helpers for tests of asynchronous streams: a gate that blocks a stream
// until the test opens it, and the message of what a call throws.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>

namespace hir::test {

// A task that blocks its stream until the test opens the gate. It gives up
// (throws) after 30 s, and the destructor opens it, so a failing test never
// leaves a stream blocked forever.
class Gate {
 public:
  ~Gate() { open(); }
  void open() {
    std::call_once(opened_, [&] { promise_.set_value(); });
  }
  std::function<void()> task() const {
    return [f = future_] {
      if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
        throw std::runtime_error("test gate never opened");
    };
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
  std::once_flag opened_;
};

// What `f` throws, or "(nothing thrown)".
template <class F>
std::string messageOf(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace hir::test
