#include "runtime/graph_capture.h"

#include "common/log.h"

namespace hir {

GraphCapture::GraphCapture(bool enabled, Device& dev,
                           std::vector<std::unique_ptr<Backend>>& backends, Diagnostics& diag,
                           Hooks hooks)
    : enabled_(enabled), dev_(dev), backends_(backends), diag_(diag), hooks_(std::move(hooks)) {}

// Before the captured run: the host waits for the runs so far, so that no
// waits on their events (which CUDA forbids inside a capture) are needed;
// then everything that would wait on them forgets them.
void GraphCapture::begin(Stream& s0, uint64_t run) {
  hooks_.synchronize_all();
  hooks_.forget_events();
  start_ = std::chrono::steady_clock::now();
  dev_.beginCapture(s0);  // first: if it throws, nothing else changed
  for (auto& b : backends_) b->setCapturing(true);
  diag_.setCapturing(true);
  capturing_ = true;
  recapture_ = false;
  HIR_LOG_INFO(Subsys::Eval, "run {}: capturing a graph", run);
}

// After the captured run's last node: the graph, launched once for this
// run. Events recorded in the capture cannot be asked about: forgotten.
void GraphCapture::end(Stream& s0, uint64_t run) {
  capturing_ = false;
  diag_.setCapturing(false);
  for (auto& b : backends_) b->setCapturing(false);
  graph_ = dev_.endCapture(s0);
  hooks_.forget_events();
  hooks_.mark_flight();
  stats_.captured = true;
  stats_.capture_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  HIR_LOG_INFO(Subsys::Eval, "run {}: graph captured in {:.2f} ms", run, stats_.capture_ms);
  launch(s0);
}

void GraphCapture::abandon(Stream& s0) noexcept {
  if (!capturing_) return;
  capturing_ = false;
  diag_.setCapturing(false);
  try {
    (void)dev_.endCapture(s0);
  } catch (const std::exception&) {
  }
  for (auto& b : backends_) {
    try {
      b->setCapturing(false);
    } catch (const std::exception&) {
    }
  }
}

void GraphCapture::replay(Stream& s0) {
  launch(s0);
  diag_.replayed();
}

void GraphCapture::rebound(uint64_t run) {
  if (!graph_) return;
  graph_.reset();
  recapture_ = true;
  HIR_LOG_INFO(Subsys::Eval, "a bind() after run {} drops the graph; the next run captures again",
               run);
}

void GraphCapture::launch(Stream& s0) {
  dev_.launchGraph(*graph_, s0);
  ++stats_.launches;
}

}  // namespace hir
