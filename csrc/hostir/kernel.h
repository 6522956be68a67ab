// Kernels an embedder registers by name, for the IR's "kernel" node:
//
//   {"op": "kernel", "name": "my_gemm", "reads": ["x", "w"], "writes": ["y"],
//    "args": {"k": "n / world"}}
//
// The evaluator calls the kernel's function when the node runs, on the rank's
// current stream, with the resolved buffers and the evaluated args. The
// function enqueues its work on that stream and returns without waiting for
// it (cuda: launch on launch.native_stream; host: device.launchHostFunc). The
// reads and writes listed in the node are what the checks and dependencies
// use: a kernel must touch nothing else.
//
// What the function throws is reported at its node (path and rank): a
// UsageError (an arg the node does not give, reads or writes the kernel
// does not take) as the node's fault, a ProgramError (exit 2); hostir's
// other errors as they are (a BackendError: exit 3); any other exception
// as the kernel's failure, a RuntimeError (exit 3).
//
// `hir run --plugin lib.so` loads a shared library first; its function
//   extern "C" void hostir_register_kernels();
// registers its kernels (an example is tests/plugin/example_kernels.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hostir/device.h>
#include <hostir/types.h>

namespace hir {

// A buffer a kernel reads or writes: the span a reference denotes.
struct KernelTensor {
  void* data = nullptr;
  DType dtype = DType::Float32;
  std::size_t count = 0;        // elements
  std::vector<int64_t> shape;   // of the referenced part (extents after its indices)
};

struct KernelLaunch {
  Device& device;
  Stream& stream;                // the node's current stream
  void* native_stream;           // device.nativeStream(stream): cudaStream_t on cuda, else null
  std::span<const KernelTensor> reads, writes;  // in the node's order
  std::span<const std::pair<std::string, int64_t>> args;  // evaluated, sorted by name
  // The value of arg `name`; UsageError naming the kernel when it is absent.
  int64_t arg(std::string_view name) const;
  std::string_view kernel;       // the kernel's name, for messages
};

using KernelFn = std::function<void(const KernelLaunch&)>;

struct KernelInfo {
  std::string name;
  std::vector<std::string> devices;  // device kinds it runs on ("host", "cuda")
  KernelFn fn;
};

// UsageError if the name is taken or the info incomplete.
void registerKernel(KernelInfo info);
const KernelInfo* findKernel(std::string_view name);
std::vector<std::string> kernelNames();

// Loads the shared library at `path` and calls its hostir_register_kernels();
// UsageError saying what failed (the file, the symbol).
void loadKernelPlugin(const std::string& path);

}  // namespace hir
