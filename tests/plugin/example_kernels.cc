// An example kernel plugin: `hir run --plugin libhostir_example_kernels.so`
// loads it, and its hostir_register_kernels() registers the kernels below.
// It uses only the public API (<hostir/kernel.h>).
//
// rotate_rows: writes[0] row i = reads[0] row (i + shift) mod rows, for a
// tensor of any shape (rows: its first extent) and any dtype, arg "shift".
#include <cstring>
#include <vector>

#include <hostir/error.h>
#include <hostir/kernel.h>

#ifdef HIR_PLUGIN_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

void rotateRows(const hir::KernelLaunch& launch) {
  if (launch.reads.size() != 1 || launch.writes.size() != 1)
    throw hir::UsageError("rotate_rows takes one read and one write");
  const hir::KernelTensor& in = launch.reads[0];
  const hir::KernelTensor& out = launch.writes[0];
  if (in.shape.empty() || in.shape != out.shape || in.dtype != out.dtype)
    throw hir::UsageError("rotate_rows: read and write need one shape and dtype, of 1-D or more");
  const int64_t rows = in.shape[0];
  const int64_t shift = rows == 0 ? 0 : ((launch.arg("shift") % rows) + rows) % rows;
  const std::size_t row_bytes = rows == 0 ? 0 : in.count * hir::dtypeSize(in.dtype) / rows;
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
#ifdef HIR_PLUGIN_CUDA
  if (launch.device.kind() == "cuda") {
    auto stream = static_cast<cudaStream_t>(launch.native_stream);
    // Two contiguous copies: rows [shift, rows) then [0, shift).
    const std::size_t head = static_cast<std::size_t>(rows - shift) * row_bytes;
    if (head > 0 &&
        cudaMemcpyAsync(dst, src + shift * row_bytes, head, cudaMemcpyDeviceToDevice, stream) !=
            cudaSuccess)
      throw hir::BackendError("rotate_rows: cudaMemcpyAsync failed");
    if (shift > 0 && cudaMemcpyAsync(dst + head, src, shift * row_bytes,
                                     cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
      throw hir::BackendError("rotate_rows: cudaMemcpyAsync failed");
    return;
  }
#endif
  // Host: the copy runs in the stream's order, like any node's work.
  launch.device.launchHostFunc(launch.stream, [=] {
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(dst + i * row_bytes, src + ((i + shift) % rows) * row_bytes, row_bytes);
  });
}

}  // namespace

extern "C" void hostir_register_kernels() {
#ifdef HIR_PLUGIN_CUDA
  std::vector<std::string> devices = {"host", "cuda"};
#else
  std::vector<std::string> devices = {"host"};
#endif
  hir::registerKernel({"rotate_rows", devices, &rotateRows});
}
