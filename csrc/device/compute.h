// The compute part of the devices (DeviceFeature::Compute): the checks of a
// matmul's arguments that both devices make when it is enqueued, and the host
// device's kernels, which its stream workers run (compute.cc; OpenBLAS).
#pragma once

#include <cstddef>
#include <string_view>

#include "device/messages.h"
#include <hostir/device.h>

namespace hir {

// Checks `args` at enqueue time (the evaluator's validation guarantees them,
// so a failure is a bug in hostir: InternalError naming `device`), except
// sizes that fit the dtype but not BLAS's 32-bit int: BackendError.
void checkMatmulArgs(const MatmulArgs& args, std::string_view device);

// Checks the arguments of Device::reduce and DeviceMessages::reduce (with
// `sync`; null: without) at enqueue time, as every device makes them
// (InternalError naming `device`): 1 to kMaxReduceSources sources, and no
// null buffer when there is something to reduce.
void checkReduceArgs(void* dst, const void* const* srcs, std::size_t sources, std::size_t count,
                     const MessageStep* sync, std::string_view device);

// out (+)= op(a) * op(b) as MatmulArgs describes it, on the calling thread:
// float32 through cblas_sgemm on the buffers themselves; float16 and
// bfloat16 widened to float32 copies, cblas_sgemm, and rounded back to
// nearest even once. k == 0 stores zeros (or leaves out as it is when
// accumulating). `args` must have passed checkMatmulArgs.
void hostMatmul(const MatmulArgs& args);

// out[i] = a[i] + b[i] for i in [0, count), on the calling thread. Floating
// dtypes add in their own precision (float16 and bfloat16 in float32, then
// rounded to nearest even: the same as an exactly rounded 16-bit add);
// integer dtypes wrap around (two's complement). out may be a or b.
void hostAdd(void* out, const void* a, const void* b, DType t, std::size_t count);

// Checks a random fill's pattern at enqueue time, as every device does
// (InternalError naming `device`): low < high, and for an integer dtype
// whole bounds within int64 that keep low < high.
void checkRandomPattern(DType t, const RandomPattern& p, std::string_view device);

// Device::unary on the calling thread (UnaryArgs says what each op does).
void hostUnary(const UnaryArgs& args);

}  // namespace hir
