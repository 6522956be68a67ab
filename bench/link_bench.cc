// The link's ceiling: how fast one GPU's memory reaches another's, every way
// the two GPUs offer, in one process and without any protocol, so that a
// backend's rate can be read against what the hardware gives and not only
// against NCCL's (#13's 1.08x bar at 1 GiB sat on it on 4 H200s).
//
//   hir_link_bench [--from 0] [--to 1] [--min 64M] [--max 1G] [--factor 4]
//       [--reps 7] [--csv PATH]
// (`hir_link_bench --help` lists them; arguments are parsed by CLI11.)
//
// The ways (the data always flows from GPU --from to GPU --to):
//   ce-push       cudaMemcpyAsync on a stream of the source: the copy engine,
//                 as ipc's put copies
//   ce-pull       the same on a stream of the destination, as ipc's get
//   ce-push+pull  half each, at once: the copy engines of both GPUs
//   ce-2streams   two halves on two streams of the source
//   sm-push       the cuda device's copy kernel (8 blocks of 256 threads an
//                 SM, 16-byte loads and stores) on the source, as NCCL's
//                 kernels move data
//   sm-pull       the same on the destination
//   ce+sm-push    3/4 by the copy engine, 1/4 by the kernel, on the source
// A sample is 4 copies of the size back to back (as hir_p2p_bench streams
// its messages), timed by CUDA events on the source's first stream, which
// the other streams fork from and join; one untimed copy before them checks
// that the way delivers (the destination poisoned, one byte a MiB and the
// last compared). Each figure is the median of --reps samples; "best" names
// the fastest way at each size: the link's ceiling there.
// Exit status: 0; 1 when the GPUs cannot be measured (fewer than 2, no peer
// access, a copy that delivered wrong bytes: said on stderr); 2 on bad
// usage.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "common/check.h"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda_interop.h"

namespace {

struct Options {
  int from = 0, to = 1;
  int64_t min = int64_t{64} << 20, max = int64_t{1} << 30, factor = 4;
  int reps = 7;
  std::string csv;
};

int parse(int argc, char** argv, Options& o) {
  CLI::App app{"The link's ceiling between two GPUs of one process: peer copies every way the\n"
               "GPUs offer (copy engines, kernels, pushes, pulls), without any protocol.\n",
               "hir_link_bench"};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.allow_extras();  // reported by hir::bench::parse, naming the option
  app.get_formatter()->column_width(24);
  app.footer("Sizes take K, M, G suffixes (KiB, MiB, GiB). An option may be given once.");
  std::string from, to, min, max, factor, reps, csv;
  using hir::bench::singleOption;
  singleOption(app, "--from", from, "GPU", "the source GPU's ordinal (default 0)");
  singleOption(app, "--to", to, "GPU", "the destination GPU's ordinal (default 1)");
  singleOption(app, "--min", min, "BYTES", "smallest copy (default 64M)");
  singleOption(app, "--max", max, "BYTES", "largest copy (default 1G)");
  singleOption(app, "--factor", factor, "F", "from one size to the next (default 4)");
  singleOption(app, "--reps", reps, "N", "samples; each figure is their median (default 7)");
  singleOption(app, "--csv", csv, "PATH", "also write way,bytes,us,gbps rows to PATH");
  return hir::bench::parse(app, argc, argv, "hir_link_bench", [&] {
    using hir::bench::parseBytes;
    using hir::bench::parseInteger;
    auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
    if (given("--from")) o.from = static_cast<int>(parseInteger("--from", from, 0, 1023));
    if (given("--to")) o.to = static_cast<int>(parseInteger("--to", to, 0, 1023));
    if (o.from == o.to)
      throw hir::UsageError(fmt::format("--from and --to name the same GPU ({})", o.from));
    // 16 bytes at least: the kernel's wide copies, and halves and quarters
    // of a size that stay multiples of 16.
    if (given("--min")) o.min = parseBytes("--min", min, 64);
    if (given("--max")) o.max = parseBytes("--max", max, 64);
    if (o.min > o.max)
      throw hir::UsageError(fmt::format("--min ({}) must not exceed --max ({})", min, max));
    if (given("--factor")) o.factor = parseInteger("--factor", factor, 2, 1024);
    if (given("--reps")) o.reps = static_cast<int>(parseInteger("--reps", reps, 1, 100000));
    if (given("--csv")) o.csv = csv;
  });
}

// What the measurement cannot go on without (no GPU, no peer access, a way
// that delivered wrong bytes): said by main, exit 1, as a failed CUDA call
// is (HIR_CUDA_CHECK's BackendError, naming the call and the device).
struct Unmeasurable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Splits a copy of `bytes` at a multiple of 16 near `num / den` of it.
std::size_t splitAt(std::size_t bytes, std::size_t num, std::size_t den) {
  return bytes / den * num / 16 * 16;
}

class Link {
 public:
  explicit Link(const Options& o) : o_(o) {
    int n = 0;
    if (cudaError_t err = cudaGetDeviceCount(&n); err != cudaSuccess) {
      (void)cudaGetLastError();
      throw Unmeasurable(fmt::format("needs GPUs {} and {}; CUDA sees none here ({})", o.from,
                                     o.to, cudaGetErrorString(err)));
    }
    if (std::max(o.from, o.to) >= n)
      throw Unmeasurable(
          fmt::format("needs GPUs {} and {}; this machine shows {}", o.from, o.to, n));
    for (auto [a, b] : {std::pair{o.from, o.to}, std::pair{o.to, o.from}}) {
      int can = 0;
      HIR_CUDA_CHECK(a, cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) throw Unmeasurable(fmt::format("GPU {} cannot map GPU {}'s memory", a, b));
      on(a);
      cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
      if (err != cudaErrorPeerAccessAlreadyEnabled)
        hir::cuda::cudaCheck(err, "cudaDeviceEnablePeerAccess", a);
      (void)cudaGetLastError();
    }
    for (int side = 0; side < 2; ++side) {
      on(gpu(side));
      int sms = 0;
      HIR_CUDA_CHECK(current_,
                     cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu(side)));
      blocks_[side] = std::max(1, sms) * 8;
      for (cudaStream_t& s : streams_[side])
        HIR_CUDA_CHECK(current_, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      for (cudaEvent_t& e : joins_[side])
        HIR_CUDA_CHECK(current_, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      HIR_CUDA_CHECK(current_,
                     cudaMalloc(side == 0 ? &src_ : &dst_, static_cast<std::size_t>(o.max)));
    }
    on(o.from);
    HIR_CUDA_CHECK(current_, cudaEventCreate(&start_));
    HIR_CUDA_CHECK(current_, cudaEventCreate(&stop_));
    HIR_CUDA_CHECK(current_, cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  }

  ~Link() {
    for (int side = 0; side < 2; ++side) {
      hir::cuda::activateQuietly(gpu(side));
      (void)cudaDeviceSynchronize();
      for (cudaStream_t s : streams_[side])
        if (s) (void)cudaStreamDestroy(s);
      for (cudaEvent_t e : joins_[side])
        if (e) (void)cudaEventDestroy(e);
      if (void* p = side == 0 ? src_ : dst_) (void)cudaFree(p);
    }
    for (cudaEvent_t e : {start_, stop_, fork_})
      if (e) (void)cudaEventDestroy(e);
    (void)cudaGetLastError();
  }

  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  struct Way {
    const char* name;
    // Enqueues one copy of `bytes` on the forked streams.
    std::function<void(std::size_t)> copy;
  };

  std::vector<Way> ways() {
    auto ce = [this](int side, int k, std::size_t off, std::size_t len) {
      use(side, k);
      HIR_CUDA_CHECK(current_, cudaMemcpyAsync(dst() + off, src() + off, len,
                                               cudaMemcpyDeviceToDevice, streams_[side][k]));
    };
    auto sm = [this](int side, int k, std::size_t off, std::size_t len) {
      use(side, k);
      HIR_CUDA_CHECK(current_, hir::cuda::launchCopy(streams_[side][k], dst() + off, src() + off,
                                                     len, blocks_[side]));
    };
    return {
        {"ce-push", [=](std::size_t b) { ce(0, 0, 0, b); }},
        {"ce-pull", [=](std::size_t b) { ce(1, 0, 0, b); }},
        {"ce-push+pull",
         [=](std::size_t b) {
           const std::size_t h = splitAt(b, 1, 2);
           ce(0, 0, 0, h);
           ce(1, 0, h, b - h);
         }},
        {"ce-2streams",
         [=](std::size_t b) {
           const std::size_t h = splitAt(b, 1, 2);
           ce(0, 0, 0, h);
           ce(0, 1, h, b - h);
         }},
        {"sm-push", [=](std::size_t b) { sm(0, 0, 0, b); }},
        {"sm-pull", [=](std::size_t b) { sm(1, 0, 0, b); }},
        {"ce+sm-push",
         [=](std::size_t b) {
           const std::size_t q = splitAt(b, 3, 4);
           ce(0, 0, 0, q);
           sm(0, 1, q, b - q);
         }},
    };
  }

  // One copy by `way`, after poisoning the destination; throws Unmeasurable
  // unless one byte a MiB and the last hold the source's.
  void verify(const Way& way, std::size_t bytes, uint8_t value) {
    on(o_.from);
    HIR_CUDA_CHECK(current_, cudaMemset(src_, value, bytes));
    on(o_.to);
    HIR_CUDA_CHECK(current_, cudaMemset(dst_, 0xEE, bytes));
    HIR_CUDA_CHECK(current_, cudaDeviceSynchronize());
    run(way, bytes, 1, false);
    on(o_.to);
    constexpr std::size_t kPitch = std::size_t{1} << 20;
    const std::size_t rows = (bytes + kPitch - 1) / kPitch;
    std::vector<uint8_t> seen(rows + 1);
    HIR_CUDA_CHECK(current_,
                   cudaMemcpy2D(seen.data(), 1, dst_, kPitch, 1, rows, cudaMemcpyDeviceToHost));
    HIR_CUDA_CHECK(current_, cudaMemcpy(&seen[rows], dst() + bytes - 1, 1, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i <= rows; ++i)
      if (seen[i] != value)
        throw Unmeasurable(fmt::format(
            "{} of {} bytes: byte {} holds {:#04x} after the copy, expected {:#04x}", way.name,
            bytes, i < rows ? i * kPitch : bytes - 1, seen[i], value));
  }

  // Microseconds per copy: `copies` copies by `way` back to back, timed on
  // the source's first stream when `timed`.
  double run(const Way& way, std::size_t bytes, int copies, bool timed) {
    on(o_.from);
    cudaStream_t first = streams_[0][0];
    HIR_CUDA_CHECK(current_, cudaEventRecord(fork_, first));
    for (int side = 0; side < 2; ++side)
      for (std::size_t k = 0; k < streams_[side].size(); ++k)
        if (side != 0 || k != 0) {
          on(gpu(side));
          HIR_CUDA_CHECK(current_, cudaStreamWaitEvent(streams_[side][k], fork_, 0));
        }
    on(o_.from);
    if (timed) HIR_CUDA_CHECK(current_, cudaEventRecord(start_, first));
    used_ = {};
    for (int i = 0; i < copies; ++i) way.copy(bytes);
    for (int side = 0; side < 2; ++side)
      for (std::size_t k = 0; k < streams_[side].size(); ++k)
        if (used_[side][k] && (side != 0 || k != 0)) {
          on(gpu(side));
          HIR_CUDA_CHECK(current_, cudaEventRecord(joins_[side][k], streams_[side][k]));
          on(o_.from);
          HIR_CUDA_CHECK(current_, cudaStreamWaitEvent(first, joins_[side][k], 0));
        }
    on(o_.from);
    HIR_CUDA_CHECK(current_, cudaEventRecord(stop_, first));
    if (!hir::cuda::pollEvent(stop_, std::chrono::seconds(60), o_.from))
      throw Unmeasurable(fmt::format("{} of {} bytes: not done after 60 s", way.name, bytes));
    if (!timed) return 0;
    float ms = 0;
    HIR_CUDA_CHECK(current_, cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms) * 1000.0 / copies;
  }

 private:
  // Makes `ordinal` current (and the device HIR_CUDA_CHECK names).
  void on(int ordinal) {
    HIR_CUDA_CHECK(ordinal, cudaSetDevice(ordinal));
    current_ = ordinal;
  }
  int gpu(int side) const { return side == 0 ? o_.from : o_.to; }
  // The stream's device current here and in the library's CUDA runtime
  // (each links its own), which launches the copy kernel.
  void use(int side, int k) {
    on(gpu(side));
    hir::cuda::activate(gpu(side));
    used_[side][static_cast<std::size_t>(k)] = true;
  }
  char* src() { return static_cast<char*>(src_); }
  char* dst() { return static_cast<char*>(dst_); }

  const Options& o_;
  int current_ = -1;  // the device on() made current
  void* src_ = nullptr;
  void* dst_ = nullptr;
  std::array<int, 2> blocks_{};
  std::array<std::array<cudaStream_t, 2>, 2> streams_{};  // [source, destination][k]
  std::array<std::array<cudaEvent_t, 2>, 2> joins_{};
  std::array<std::array<bool, 2>, 2> used_{};
  cudaEvent_t start_ = nullptr, stop_ = nullptr, fork_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parse(argc, argv, o); rc >= 0) return rc;
  try {
    Link link(o);
    const std::vector<Link::Way> ways = link.ways();
    std::vector<int64_t> sizes;
    for (int64_t b = o.min; b <= o.max; b *= o.factor) sizes.push_back(b);
    std::printf("# hir_link_bench: GPU %d -> GPU %d, GB/s, median of %d samples of 4 copies\n",
                o.from, o.to, o.reps);
    std::printf("%12s", "bytes");
    for (const Link::Way& w : ways) std::printf(" %13s", w.name);
    std::printf("  best\n");
    std::string csv = "way,bytes,us,gbps\n";
    uint8_t value = 1;
    for (int64_t b : sizes) {
      const auto bytes = static_cast<std::size_t>(b);
      std::printf("%12lld", static_cast<long long>(b));
      double best = 0;
      const char* best_way = "";
      for (const Link::Way& w : ways) {
        link.verify(w, bytes, value);
        value = static_cast<uint8_t>(value % 200 + 1);
        std::vector<double> us;
        for (int r = 0; r < o.reps; ++r) us.push_back(link.run(w, bytes, 4, true));
        std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2),
                         us.end());
        const double median = us[us.size() / 2];
        const double gbps = static_cast<double>(b) / median / 1e3;
        std::printf(" %13.1f", gbps);
        csv += fmt::format("{},{},{:.2f},{:.2f}\n", w.name, b, median, gbps);
        if (gbps > best) best = gbps, best_way = w.name;
      }
      std::printf("  %.1f %s\n", best, best_way);
      std::fflush(stdout);
    }
    if (!o.csv.empty()) {
      std::ofstream f(o.csv);
      f << csv;
      if (!f) throw Unmeasurable(fmt::format("cannot write {}", o.csv));
    }
    return 0;
  } catch (const Unmeasurable& e) {
    std::fprintf(stderr, "hir_link_bench: %s\n", e.what());
    return 1;
  } catch (const hir::Error& e) {
    std::fprintf(stderr, "hir_link_bench: %s\n", e.what());
    return 1;
  }
}
