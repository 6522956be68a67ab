// Communication benchmark: hostir's NCCL backend against a raw NCCL loop, side
// by side in one run, one MPI rank per GPU (the local rank).
//
//   mpirun -np N hir_comm_bench [--min 8] [--max 1G] [--factor 8] [--iters 100]
//       [--warmup 5] [--reps 5] [--ops allreduce,allgather,...] [--dtype float32]
//       [--csv PATH]
// (`hir_comm_bench --help` lists them all; arguments are parsed by CLI11,
// before MPI starts.)
//
// For each operation and size, alternating in every repetition:
//   raw: its own communicator and stream, ncclXxx in a loop;
//   hir: NcclBackend::post() + wait(stream mode) in a loop on a stream of the
//        hostir cuda device, through the Device/Backend interfaces.
// Both use the same buffers and are timed with CUDA events around the loop;
// a rank's time per op is the loop time / iterations, the reported time is the
// slowest rank's, and the median over repetitions. Bandwidths follow
// nccl-tests: "size" is the larger buffer of one rank (allgather: the output,
// reduce_scatter and alltoall: the input), algbw = size / time, busbw =
// algbw * factor (allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall
// (n-1)/n; broadcast, reduce, sendrecv 1). sendrecv is the nccl-tests
// pattern: every rank sends to rank+1 and receives from rank-1 in one group
// (a pair exchange at 2 ranks).
// Host columns: enqueue = host time per iteration of the loop (raw: the NCCL
// call; hir: the joined post, or post + stream wait with --detached), post =
// host time inside post() alone (the enqueue time unless --detached).
// Messages up to 64 KiB get three times --reps repetitions.
// --graph 1: each loop (raw: the NCCL calls; hir: the posts, through
// Device::beginCapture and Backend::setCapturing as the evaluator's graph
// mode does) is captured once per operation and size into a CUDA graph, and
// every repetition times one launch of it (nccl-tests -G); enqueue is then
// the host time of that launch per iteration.
#include <cuda.h>  // driver API types only (entry points, no libcuda link)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/backend.h>
#include "backends/nccl/nccl_types.h"
#include "bench_cli.h"
#include <hostir/types.h>
#include "common/check.h"
#include "device/cuda_interop.h"
#include <hostir/device.h>
#include <hostir/bootstrap.h>

namespace hir {
namespace {

using hir::bench::median;


using Clock = std::chrono::steady_clock;
constexpr Duration kTimeout = std::chrono::minutes(5);

// ------------------------------------------------------------------ options

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{1} << 30;
  std::size_t factor = 8;
  int iters = 100;
  int warmup = 5;
  int reps = 5;
  DType dtype = DType::Float32;
  std::vector<std::string> ops = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                  "reduce",    "alltoall",  "sendrecv"};
  std::string csv;
  bool api_costs = true;
  bool raw_events = false;  // diagnosis: record an event after every raw op
  bool detached = false;    // hir: post() + wait() instead of postJoined(), as the
                            // evaluator does for a wait that does not follow the post
  bool graph = false;       // capture each loop into a CUDA graph, time its launches
  bool symmetric = false;   // buffers in NCCL symmetric windows (nccl-tests -R 2)
};

bool parseSwitch(const std::string& flag, const std::string& text) {
  if (text != "0" && text != "1")
    throw UsageError(fmt::format("{} expects 0 or 1, got '{}'", flag, text));
  return text == "1";
}

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Parses the command line before MPI is initialized, on every rank alike, so
// that --help and bad usage end every rank cleanly. Returns -1 to go on, or
// the exit code: 0 after --help, 2 after bad usage (the message names the
// flag).
int parseOptions(int argc, char** argv, Options& o) {
  CLI::App app{"Communication benchmark: hostir's NCCL backend against a raw NCCL loop, one MPI\n"
               "rank per GPU:\n  mpirun -np N hir_comm_bench [options]\n",
               "hir_comm_bench"};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.allow_extras();  // reported below, naming the option
  app.get_formatter()->column_width(24);
  app.footer("Operations: allreduce, allgather, reduce_scatter, broadcast, reduce, alltoall,\n"
             "sendrecv. Sizes take K, M, G suffixes (KiB, MiB, GiB). An option may be given\n"
             "once; values as `--opt value` or `--opt=value`.");
  std::string min, max, factor, iters, warmup, reps, ops, dtype, csv, api_costs, raw_events,
      detached, graph, symmetric;
  auto single = [&](const char* name, std::string& into, const char* type, const char* help) {
    bench::singleOption(app, name, into, type, help);
  };
  single("--min", min, "BYTES", "smallest message (default 8)");
  single("--max", max, "BYTES", "largest message (default 1G)");
  single("--factor", factor, "F", "from one size to the next (default 8)");
  single("--iters", iters, "N", "operations per timed loop (default 100; fewer above 32 MiB)");
  single("--warmup", warmup, "N", "untimed operations first (default 5)");
  single("--reps", reps, "N", "timed loops, median of them (default 5; x3 up to 64 KiB)");
  single("--ops", ops, "LIST", "comma-separated operations (default: all of them)");
  single("--dtype", dtype, "DTYPE", "element type (default float32)");
  single("--csv", csv, "PATH", "also write the results to PATH (rank 0)");
  single("--api-costs", api_costs, "0|1", "first time the host cost of CUDA calls (default 1)");
  single("--raw-events", raw_events, "0|1",
         "diagnosis: raw records an event after every op (default 0)");
  single("--detached", detached, "0|1", "hir posts detached: post() + wait() (default 0)");
  single("--symmetric", symmetric, "0|1",
         "buffers in NCCL symmetric windows, for raw NCCL and the backend (default 0)");
  single("--graph", graph, "0|1",
         "capture each timed loop into a CUDA graph and time its launches (default 0)");
  return bench::parse(app, argc, argv, "hir_comm_bench", [&] {
    using bench::parseInteger;
    auto bytes = [](const char* flag, const std::string& text) {
      return static_cast<std::size_t>(bench::parseBytes(flag, text, 1));
    };
    auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
    if (given("--min")) o.min_bytes = bytes("--min", min);
    if (given("--max")) o.max_bytes = bytes("--max", max);
    if (given("--factor"))
      o.factor = static_cast<std::size_t>(parseInteger("--factor", factor, 2, 1024));
    if (given("--iters")) o.iters = static_cast<int>(parseInteger("--iters", iters, 1, INT_MAX));
    if (given("--warmup"))
      o.warmup = static_cast<int>(parseInteger("--warmup", warmup, 0, INT_MAX));
    if (given("--reps")) o.reps = static_cast<int>(parseInteger("--reps", reps, 1, 1000000));
    if (given("--ops")) o.ops = splitList(ops);
    if (given("--dtype")) o.dtype = parseEnum(kDTypeNames, dtype, "--dtype", "dtype");
    if (given("--csv")) o.csv = csv;
    if (given("--api-costs")) o.api_costs = parseSwitch("--api-costs", api_costs);
    if (given("--raw-events")) o.raw_events = parseSwitch("--raw-events", raw_events);
    if (given("--detached")) o.detached = parseSwitch("--detached", detached);
    if (given("--graph")) o.graph = parseSwitch("--graph", graph);
    if (given("--symmetric")) o.symmetric = parseSwitch("--symmetric", symmetric);
    HIR_CHECK_AS(UsageError, o.min_bytes <= o.max_bytes, "--min ({}) must not exceed --max ({})",
                 o.min_bytes, o.max_bytes);
    HIR_CHECK_AS(UsageError, !o.ops.empty(), "--ops names no operation");
    for (const std::string& op : o.ops)
      HIR_CHECK_AS(UsageError,
                   op == "allreduce" || op == "allgather" || op == "reduce_scatter" ||
                       op == "broadcast" || op == "reduce" || op == "alltoall" ||
                       op == "sendrecv",
                   "--ops: unknown op '{}'; expected allreduce, allgather, reduce_scatter, "
                   "broadcast, reduce, alltoall or sendrecv",
                   op);
  });
}

// ---------------------------------------------------------------- checking

void cudaOk(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw BackendError(fmt::format("bench: {} failed: {}", what, cudaGetErrorString(err)));
}

void ncclOk(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw BackendError(fmt::format("bench: {} failed: {} ({})", what, ncclGetErrorString(r),
                                   ncclGetLastError(nullptr)));
}

// ------------------------------------------------------------- one measure

// An operation at one size: element counts and the two ways to run it.
struct Shape {
  std::size_t bytes = 0;  // nccl-tests "size"
  std::size_t count = 0;  // elements per NCCL call (per chunk for the chunked ones)
  double bus_factor = 1;
};

Shape shapeOf(const std::string& op, std::size_t bytes, std::size_t el, int n) {
  Shape s;
  const double nd = n;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall") {
    s.count = bytes / el / n;
    s.bytes = s.count * el * n;
    s.bus_factor = (nd - 1) / nd;
  } else {
    s.count = bytes / el;
    s.bytes = s.count * el;
    s.bus_factor = op == "allreduce" ? 2 * (nd - 1) / nd : 1.0;
  }
  return s;
}

struct Sample {
  double gpu_us = 0;      // per op
  double enqueue_us = 0;  // host, per iteration
  double post_us = 0;     // host, inside post() (hir only)
};

class Bench {
 public:
  Bench(Bootstrap& boot, const Options& o) : boot_(boot), o_(o) {
    rank_ = boot.rank();
    world_ = boot.world();
    device_ = createDevice("cuda", boot.localRank());
    ordinal_ = cuda::deviceOrdinal(*device_);
    cuda::activate(ordinal_);

    // hostir: the nccl backend on the world.
    const BackendInfo* info = findBackend("nccl");
    HIR_CHECK_AS(BackendError, info != nullptr, "bench: the nccl backend is not registered");
    backend_ = info->create();
    BackendContext ctx;
    ctx.device = device_.get();
    ctx.bootstrap = &boot;
    std::vector<int> all(world_);
    for (int r = 0; r < world_; ++r) all[r] = r;
    ctx.teams = {all};
    ctx.timeout = kTimeout;
    backend_->setup(ctx);  // also defaults NCCL_NVLS_ENABLE to 0
    current_ = device_->createStream();
    done_ = device_->createEvent();

    // raw: its own communicator and stream.
    ncclUniqueId id{};
    if (rank_ == 0) ncclOk(ncclGetUniqueId(&id), "ncclGetUniqueId");
    boot.broadcast(&id, sizeof(id), 0);
    ncclOk(ncclCommInitRank(&raw_comm_, world_, id, rank_), "ncclCommInitRank");
    cudaOk(cudaStreamCreateWithFlags(&raw_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaOk(cudaEventCreate(&start_), "cudaEventCreate");
    cudaOk(cudaEventCreate(&stop_), "cudaEventCreate");
    cudaOk(cudaEventCreateWithFlags(&raw_done_, cudaEventDisableTiming), "cudaEventCreate");

    // Buffers for the largest size (input and output are each at most
    // max_bytes), filled with small values (no NaN or denormal slowdowns).
    el_ = dtypeSize(o.dtype);
    buffer_bytes_ = std::max(o.max_bytes, std::size_t{256});
    if (o.symmetric) {
      // The backend's symmetric memory (registered with its communicator),
      // registered with the raw communicator as well.
      const int world_team[] = {0};
      in_ = backend_->allocateSymmetric(buffer_bytes_, world_team);
      out_ = backend_->allocateSymmetric(buffer_bytes_, world_team);
      HIR_CHECK_AS(UsageError, in_ != nullptr && out_ != nullptr,
                   "--symmetric 1: this NCCL has no symmetric windows (2.27 and later)");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
      for (void* p : {in_, out_}) {
        raw_windows_.emplace_back();
        ncclOk(ncclCommWindowRegister(raw_comm_, p, buffer_bytes_, &raw_windows_.back(),
                                      NCCL_WIN_COLL_SYMMETRIC),
               "ncclCommWindowRegister");
      }
#endif
    } else {
      in_ = device_->allocate(buffer_bytes_);
      out_ = device_->allocate(buffer_bytes_);
    }
    device_->fill(device_->defaultStream(), in_, o.dtype, buffer_bytes_ / el_, 1, 0);
    device_->fill(device_->defaultStream(), out_, o.dtype, buffer_bytes_ / el_, 1, 0);
    device_->synchronize(device_->defaultStream(), kTimeout);
  }

  ~Bench() {
    // Leave nothing in flight, then tear down in reverse order.
    try {
      device_->synchronize(*current_, kTimeout);
      cudaOk(cudaStreamSynchronize(raw_stream_), "cudaStreamSynchronize");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench teardown: %s\n", e.what());
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    for (auto it = raw_windows_.rbegin(); it != raw_windows_.rend(); ++it)
      (void)ncclCommWindowDeregister(raw_comm_, *it);
#endif
    ncclCommDestroy(raw_comm_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaEventDestroy(raw_done_);
    cudaStreamDestroy(raw_stream_);
    if (!o_.symmetric) {
      device_->deallocate(in_);
      device_->deallocate(out_);
    }
    backend_.reset();  // frees symmetric buffers
  }

  void run() {
    if (o_.api_costs) apiCosts();
    printHeader();
    for (const std::string& op : o_.ops) {
      for (std::size_t bytes = o_.min_bytes; bytes <= o_.max_bytes; bytes *= o_.factor) {
        Shape s = shapeOf(op, bytes, el_, world_);
        if (s.count == 0) continue;
        measure(op, s);
        if (bytes > o_.max_bytes / o_.factor) break;  // no overflow past max
      }
    }
    if (rank_ == 0 && !o_.csv.empty()) writeCsv();
  }

 private:
  struct Row {
    std::string op;
    Shape shape;
    Sample raw, hir;
  };

  static constexpr std::size_t kSmallBytes = std::size_t{64} << 10;

  int itersFor(std::size_t bytes) const {
    // Keep a loop of large messages near 32 MiB per iteration-budget.
    constexpr std::size_t kBudget = std::size_t{32} << 20;
    if (bytes <= kBudget) return o_.iters;
    return std::max(5, static_cast<int>(o_.iters * static_cast<double>(kBudget) / bytes));
  }

  // ---------------------------------------------------------- API costs

  // Host cost of the CUDA calls a post makes, runtime and driver API (the
  // driver entry points through cudaGetDriverEntryPointByVersion), per call.
  void apiCosts() {
    constexpr int kCalls = 4000;
    cudaStream_t a = nullptr, b = nullptr;
    cudaEvent_t e = nullptr;
    cudaOk(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaOk(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaOk(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    using RecordFn = CUresult(CUDAAPI*)(CUevent, CUstream);
    using WaitFn = CUresult(CUDAAPI*)(CUstream, CUevent, unsigned int);
    void* record_fn = nullptr;
    void* wait_fn = nullptr;
    cudaOk(cudaGetDriverEntryPointByVersion("cuEventRecord", &record_fn, 12000, cudaEnableDefault,
                                            nullptr),
           "cudaGetDriverEntryPointByVersion");
    cudaOk(cudaGetDriverEntryPointByVersion("cuStreamWaitEvent", &wait_fn, 12000,
                                            cudaEnableDefault, nullptr),
           "cudaGetDriverEntryPointByVersion");
    auto per_call = [&](const std::function<void()>& fn) {
      for (int i = 0; i < 100; ++i) fn();
      const auto t0 = Clock::now();
      for (int i = 0; i < kCalls; ++i) fn();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      cudaOk(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      return us / kCalls;
    };
    int dev = 0;
    Clock::time_point sink{};
    const double clock = per_call([&] { sink = std::max(sink, Clock::now()); });
    const double get_device = per_call([&] { (void)cudaGetDevice(&dev); });
    const double record = per_call([&] { (void)cudaEventRecord(e, a); });
    const double wait = per_call([&] { (void)cudaStreamWaitEvent(b, e, 0); });
    const double join = per_call([&] {
      (void)cudaEventRecord(e, a);
      (void)cudaStreamWaitEvent(b, e, 0);
    });
    double cu_record = 0, cu_wait = 0;
    if (record_fn && wait_fn) {
      auto rec = reinterpret_cast<RecordFn>(record_fn);
      auto wt = reinterpret_cast<WaitFn>(wait_fn);
      cu_record = per_call([&] { (void)rec(e, a); });
      cu_wait = per_call([&] { (void)wt(b, e, 0); });
    }
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    if (rank_ == 0)
      std::printf("# host us per call: steady_clock::now %.3f, cudaGetDevice %.3f, "
                  "cudaEventRecord %.3f, cudaStreamWaitEvent %.3f, record+wait %.3f, "
                  "cuEventRecord %.3f, cuStreamWaitEvent %.3f\n",
                  clock, get_device, record, wait, join, cu_record, cu_wait);
  }

  // ------------------------------------------------------------ raw NCCL

  void rawOnce(const std::string& op, const Shape& s) {
    const ncclDataType_t dt = ncclType(o_.dtype);
    const int next = (rank_ + 1) % world_, prev = (rank_ - 1 + world_) % world_;
    if (op == "allreduce")
      ncclOk(ncclAllReduce(in_, out_, s.count, dt, ncclSum, raw_comm_, raw_stream_), "allreduce");
    else if (op == "allgather")
      ncclOk(ncclAllGather(in_, out_, s.count, dt, raw_comm_, raw_stream_), "allgather");
    else if (op == "reduce_scatter")
      ncclOk(ncclReduceScatter(in_, out_, s.count, dt, ncclSum, raw_comm_, raw_stream_),
             "reduce_scatter");
    else if (op == "broadcast")
      ncclOk(ncclBroadcast(in_, out_, s.count, dt, 0, raw_comm_, raw_stream_), "broadcast");
    else if (op == "reduce")
      ncclOk(ncclReduce(in_, out_, s.count, dt, ncclSum, 0, raw_comm_, raw_stream_), "reduce");
    else if (op == "alltoall") {
      // The same grouped send/recv the backend uses (and nccl-tests'
      // alltoall), the own chunk included as a send/recv to self.
      ncclOk(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < world_; ++r) {
        const std::size_t off = static_cast<std::size_t>(r) * s.count * el_;
        ncclOk(ncclSend(static_cast<char*>(in_) + off, s.count, dt, r, raw_comm_, raw_stream_),
               "ncclSend");
        ncclOk(ncclRecv(static_cast<char*>(out_) + off, s.count, dt, r, raw_comm_, raw_stream_),
               "ncclRecv");
      }
      ncclOk(ncclGroupEnd(), "ncclGroupEnd");
    } else if (op == "sendrecv") {
      ncclOk(ncclGroupStart(), "ncclGroupStart");
      ncclOk(ncclSend(in_, s.count, dt, next, raw_comm_, raw_stream_), "ncclSend");
      ncclOk(ncclRecv(out_, s.count, dt, prev, raw_comm_, raw_stream_), "ncclRecv");
      ncclOk(ncclGroupEnd(), "ncclGroupEnd");
    }
  }

  // ------------------------------------------------------------- hostir

  std::vector<PostArgs> hirArgs(const std::string& op, const Shape& s) const {
    PostArgs a;
    a.dtype = o_.dtype;
    a.reduce = ReduceOp::Sum;
    a.input = in_;
    a.output = out_;
    a.count = s.count;
    a.root = 0;
    a.path = "bench";
    if (op == "allreduce") a.type = CommType::Allreduce;
    else if (op == "allgather") a.type = CommType::Allgather;
    else if (op == "reduce_scatter") a.type = CommType::ReduceScatter;
    else if (op == "broadcast") a.type = CommType::Broadcast;
    else if (op == "reduce") a.type = CommType::Reduce;
    else if (op == "alltoall") a.type = CommType::Alltoall;
    if (op != "sendrecv") return {a};
    PostArgs send = a, recv = a;
    send.type = CommType::Send;
    send.peer = (rank_ + 1) % world_;
    recv.type = CommType::Recv;
    recv.peer = (rank_ - 1 + world_) % world_;
    return {send, recv};
  }

  // --------------------------------------------------------------- timing

  double elapsedUs(cudaEvent_t a, cudaEvent_t b) {
    HIR_CHECK_AS(TimeoutError, cuda::pollEvent(b, kTimeout, ordinal_),
                 "bench: a timed loop did not finish within {} ms", kTimeout.count());
    float ms = 0;
    cudaOk(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms * 1000.0;
  }

  // `enqueue` (the work of `iters` operations) on `stream`, between two
  // timing events, after a barrier: GPU time and host enqueue time per op.
  template <class Enqueue>
  Sample timed(cudaStream_t stream, int iters, Enqueue&& enqueue) {
    boot_.barrier();
    cudaOk(cudaEventRecord(start_, stream), "cudaEventRecord");
    const auto t0 = Clock::now();
    enqueue();
    const auto t1 = Clock::now();
    cudaOk(cudaEventRecord(stop_, stream), "cudaEventRecord");
    Sample out;
    out.gpu_us = elapsedUs(start_, stop_) / iters;
    out.enqueue_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
    out.post_us = out.enqueue_us;
    return out;
  }

  Sample timeRaw(const std::string& op, const Shape& s, int iters) {
    return timed(raw_stream_, iters, [&] {
      for (int i = 0; i < iters; ++i) {
        rawOnce(op, s);
        if (o_.raw_events) cudaOk(cudaEventRecord(raw_done_, raw_stream_), "cudaEventRecord");
      }
    });
  }

  // --graph: one loop of `iters` operations of each side, captured.
  struct Graphs {
    cudaGraphExec_t raw = nullptr;
    std::unique_ptr<Graph> hir;
    ~Graphs() {
      if (raw) (void)cudaGraphExecDestroy(raw);
    }
  };

  void captureLoops(const std::string& op, const Shape& s, const std::vector<PostArgs>& args,
                    int iters, Graphs& g) {
    cudaOk(cudaStreamBeginCapture(raw_stream_, cudaStreamCaptureModeThreadLocal),
           "cudaStreamBeginCapture");
    for (int i = 0; i < iters; ++i) rawOnce(op, s);
    cudaGraph_t graph = nullptr;
    cudaOk(cudaStreamEndCapture(raw_stream_, &graph), "cudaStreamEndCapture");
    cudaOk(cudaGraphInstantiate(&g.raw, graph, 0), "cudaGraphInstantiate");
    cudaOk(cudaGraphDestroy(graph), "cudaGraphDestroy");
    device_->synchronize(*current_, kTimeout);
    backend_->setCapturing(true);
    device_->beginCapture(*current_);
    hirLoop(args, iters);
    g.hir = device_->endCapture(*current_);
    backend_->setCapturing(false);
  }

  Sample timeRawGraph(cudaGraphExec_t g, int iters) {
    return timed(raw_stream_, iters,
                 [&] { cudaOk(cudaGraphLaunch(g, raw_stream_), "cudaGraphLaunch"); });
  }

  Sample timeHirGraph(Graph& g, int iters) {
    return timed(cuda::nativeStream(*current_, "bench"), iters,
                 [&] { device_->launchGraph(g, *current_); });
  }

  // As the evaluator posts a communication that the next node waits for
  // (lowering marks it joined): the loop is the posts alone, like the raw
  // loop is the NCCL calls alone (no clock read per iteration either).
  void hirLoop(const std::vector<PostArgs>& args, int iters) {
    for (int i = 0; i < iters; ++i)
      if (!backend_->postJoined(args, *current_, *done_))
        backend_->wait(*done_, *current_, WaitMode::Stream, kTimeout);
  }

  Sample timeHir(const std::vector<PostArgs>& args, int iters) {
    double post_us = 0;
    Sample out = timed(cuda::nativeStream(*current_, "bench"), iters, [&] {
      if (!o_.detached) return hirLoop(args, iters);
      for (int i = 0; i < iters; ++i) {
        const auto p0 = Clock::now();
        backend_->post(args, *current_, *done_);
        post_us += std::chrono::duration<double, std::micro>(Clock::now() - p0).count();
        backend_->wait(*done_, *current_, WaitMode::Stream, kTimeout);
      }
    });
    if (o_.detached) out.post_us = post_us / iters;
    return out;
  }

  // The slowest rank's value.
  double maxOverRanks(double v) {
    std::vector<double> all(static_cast<std::size_t>(world_));
    boot_.allgather(&v, all.data(), sizeof(double));
    return *std::max_element(all.begin(), all.end());
  }

  void measure(const std::string& op, const Shape& s) {
    const int iters = itersFor(s.bytes);
    const std::vector<PostArgs> args = hirArgs(op, s);
    if (o_.warmup > 0) {
      timeRaw(op, s, o_.warmup);
      timeHir(args, o_.warmup);
    }
    Graphs graphs;
    if (o_.graph) {
      captureLoops(op, s, args, iters, graphs);
      timeRawGraph(graphs.raw, iters);  // the first launch uploads the graph
      timeHirGraph(*graphs.hir, iters);
    }
    auto raw_sample = [&] {
      return o_.graph ? timeRawGraph(graphs.raw, iters) : timeRaw(op, s, iters);
    };
    auto hir_sample = [&] {
      return o_.graph ? timeHirGraph(*graphs.hir, iters) : timeHir(args, iters);
    };
    std::vector<double> raw_us, hir_us, raw_enq, hir_enq, hir_post;
    // Small messages are cheap to repeat and the noisiest: three times the
    // repetitions.
    const int reps = s.bytes <= kSmallBytes ? 3 * o_.reps : o_.reps;
    for (int rep = 0; rep < reps; ++rep) {
      Sample raw, hir;
      if (rep % 2 == 0) {
        raw = raw_sample();
        hir = hir_sample();
      } else {
        hir = hir_sample();
        raw = raw_sample();
      }
      raw_us.push_back(maxOverRanks(raw.gpu_us));
      hir_us.push_back(maxOverRanks(hir.gpu_us));
      raw_enq.push_back(maxOverRanks(raw.enqueue_us));
      hir_enq.push_back(maxOverRanks(hir.enqueue_us));
      hir_post.push_back(maxOverRanks(hir.post_us));
    }
    Row row;
    row.op = op;
    row.shape = s;
    row.raw = {median(raw_us), median(raw_enq), 0};
    row.hir = {median(hir_us), median(hir_enq), median(hir_post)};
    rows_.push_back(row);
    if (rank_ == 0) printRow(row);
  }

  // --------------------------------------------------------------- output

  static double algbw(const Row& r, const Sample& s) {
    return s.gpu_us > 0 ? static_cast<double>(r.shape.bytes) / (s.gpu_us * 1e3) : 0;  // GB/s
  }

  static std::string human(std::size_t bytes) {
    if (bytes >= (std::size_t{1} << 30) && bytes % (std::size_t{1} << 30) == 0)
      return fmt::format("{}G", bytes >> 30);
    if (bytes >= (std::size_t{1} << 20) && bytes % (std::size_t{1} << 20) == 0)
      return fmt::format("{}M", bytes >> 20);
    if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}K", bytes >> 10);
    return fmt::format("{}", bytes);
  }

  void printHeader() const {
    if (rank_ != 0) return;
    std::printf("# hir_comm_bench: %d rank(s), device %s, dtype %s, reps %d (%d up to 64 KiB; "
                "median of the slowest rank), nccl %d%s%s%s%s\n",
                world_, device_->describe().c_str(), std::string(toString(o_.dtype)).c_str(),
                o_.reps, 3 * o_.reps, NCCL_VERSION_CODE,
                o_.raw_events ? "; raw records an event after every op" : "",
                o_.detached ? "; hir posts detached (post + wait)" : "",
                o_.graph ? "; each loop captured in a CUDA graph, launches timed" : "",
                o_.symmetric ? "; buffers in NCCL symmetric windows" : "");
    std::printf("# time per op in us (CUDA events); busbw in GB/s; enq = host us per iteration; "
                "post = host us in post()\n");
    std::printf("%-15s %8s %12s %10s %10s %9s %9s %8s %8s %8s %8s\n", "op", "size", "count",
                "raw_us", "hir_us", "raw_bus", "hir_bus", "hir/raw", "raw_enq", "hir_enq",
                "post");
    std::fflush(stdout);
  }

  void printRow(const Row& r) const {
    const double f = r.shape.bus_factor;
    std::printf("%-15s %8s %12zu %10.2f %10.2f %9.2f %9.2f %8.3f %8.2f %8.2f %8.2f\n",
                r.op.c_str(), human(r.shape.bytes).c_str(), r.shape.count, r.raw.gpu_us,
                r.hir.gpu_us, algbw(r, r.raw) * f, algbw(r, r.hir) * f,
                r.raw.gpu_us > 0 ? r.hir.gpu_us / r.raw.gpu_us : 0, r.raw.enqueue_us,
                r.hir.enqueue_us, r.hir.post_us);
    std::fflush(stdout);
  }

  void writeCsv() const {
    std::ofstream out(o_.csv);
    if (!out) {
      std::fprintf(stderr, "bench: cannot write %s\n", o_.csv.c_str());
      return;
    }
    out << "world,op,dtype,bytes,count,raw_us,hir_us,raw_algbw,raw_busbw,hir_algbw,hir_busbw,"
           "hir_over_raw,raw_enqueue_us,hir_enqueue_us,hir_post_us,graph,symmetric\n";
    for (const Row& r : rows_) {
      const double f = r.shape.bus_factor;
      out << fmt::format("{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.4f},{:.3f},"
                         "{:.3f},{:.3f},{:d},{:d}\n",
                         world_, r.op, toString(o_.dtype), r.shape.bytes, r.shape.count,
                         r.raw.gpu_us, r.hir.gpu_us, algbw(r, r.raw), algbw(r, r.raw) * f,
                         algbw(r, r.hir), algbw(r, r.hir) * f,
                         r.raw.gpu_us > 0 ? r.hir.gpu_us / r.raw.gpu_us : 0, r.raw.enqueue_us,
                         r.hir.enqueue_us, r.hir.post_us, o_.graph ? 1 : 0,
                         o_.symmetric ? 1 : 0);
    }
  }

  Bootstrap& boot_;
  const Options& o_;
  int rank_ = 0, world_ = 1, ordinal_ = 0;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stream> current_;
  std::unique_ptr<Event> done_;
  ncclComm_t raw_comm_ = nullptr;
  cudaStream_t raw_stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;  // with timing
  cudaEvent_t raw_done_ = nullptr;                // --raw-events
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  std::vector<ncclWindow_t> raw_windows_;  // --symmetric
#endif
  std::size_t el_ = 4, buffer_bytes_ = 0;
  void* in_ = nullptr;
  void* out_ = nullptr;
  std::vector<Row> rows_;
};

}  // namespace
}  // namespace hir

int main(int argc, char** argv) {
  hir::Options options;
  if (int done = hir::parseOptions(argc, argv, options); done >= 0) return done;
  std::unique_ptr<hir::Bootstrap> boot;
  try {
    boot = hir::createMpiBootstrap(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hir_comm_bench: cannot start MPI: %s\n", e.what());
    return 3;
  }
  int rc = 0;
  try {
    hir::Bench bench(*boot, options);
    bench.run();
  } catch (const hir::Error& e) {
    std::fprintf(stderr, "hir_comm_bench rank %d: %s\n", boot->rank(), e.what());
    rc = e.exitCode();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hir_comm_bench rank %d: %s\n", boot->rank(), e.what());
    rc = 4;
  }
  boot.reset();
  return rc;
}
