// The arithmetic of reductions on the host, shared by the host backends
// (mpi's float16/bfloat16 operations and its avg, local's every operation):
// native operations of the dtype (integers wrap, as MPI's built-in ops
// compute), float16 and bfloat16 combined in float and rounded back at every
// step, avg as a sum then a division in the dtype (integers truncate toward
// zero).
#pragma once

#include <cstddef>

#include <hostir/types.h>

namespace hir {

// acc[i] = in[i] (op) acc[i] for n elements of dtype t; avg combines as sum.
void combineInto(void* acc, const void* in, std::size_t n, DType t, ReduceOp op);

// avg's division of the sum by `divisor`, in the dtype.
void divideBy(void* data, DType t, std::size_t n, int divisor);

}  // namespace hir
