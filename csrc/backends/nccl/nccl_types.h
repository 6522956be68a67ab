// hostir's dtypes and reduce ops as NCCL's (internal: pulls in nccl.h; used
// by the NCCL backend and the benchmarks, never by public headers).
#pragma once

#include <nccl.h>

#include <hostir/types.h>
#include "common/check.h"

namespace hir {

inline ncclDataType_t ncclType(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8: return ncclUint8;
  }
  HIR_INTERNAL_ASSERT(false, "nccl: unhandled dtype {}", static_cast<int>(t));
}

inline ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Prod: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
  }
  HIR_INTERNAL_ASSERT(false, "nccl: unhandled reduce op {}", static_cast<int>(op));
}

}  // namespace hir
