// The NCCL backend's operations (nccl_state.h): every communication type
// as NCCL calls on the post's target stream (gather, scatter and alltoall as
// grouped send/recv), and the scratch copies of inputs that overlap their
// outputs other than in NCCL's in-place layouts.
#include <algorithm>
#include <string_view>

#include "common/buffer_ranges.h"
#include "backends/nccl/nccl_state.h"
#include "backends/nccl/nccl_types.h"

namespace hir {

namespace {

// Alignment of the pieces of the scratch buffer (CUDA's allocation alignment).
constexpr std::size_t kScratchAlignment = 256;

}  // namespace

const nccl::TeamComm& NcclBackend::State::teamOf(const PostArgs& op, std::string_view path) const {
  // Send and recv name their peer by world rank: they use the world.
  int team = isPointToPoint(op.type) ? 0 : op.team;
  HIR_INTERNAL_ASSERT(team >= 0 && team < static_cast<int>(teams.size()),
                      "{}: nccl post of {} names team {}, but setup made {} team(s)", path,
                      toString(op.type), op.team, teams.size());
  const nccl::TeamComm& t = teams[team];
  HIR_INTERNAL_ASSERT(t.comm != nullptr,
                      "{}: rank {} posts a {} in team {}, of which it is not a member", path,
                      rank, toString(op.type), team);
  return t;
}

void NcclBackend::State::enqueueAll(std::span<const PostArgs> ops, std::string_view path) {
  scratch_used = 0;
  if (ops.size() == 1) {
    enqueue(ops[0]);
  } else if (ops.size() > 1) {
    nccl::Group group(rank, path);
    for (const PostArgs& op : ops) enqueue(op);
    group.end();
  }
}

// `bytes` of scratch for the current post, after what it took so far; a
// larger buffer when they do not fit.
void* NcclBackend::State::scratchFor(std::size_t bytes, std::string_view path) {
  std::size_t offset = (scratch_used + kScratchAlignment - 1) / kScratchAlignment *
                       kScratchAlignment;
  if (scratch == nullptr || offset + bytes > scratch_bytes) {
    if (scratch) retired.push_back(scratch);
    scratch = nullptr;
    std::size_t capacity = std::max(bytes, 2 * scratch_bytes);
    cudaError_t err = cudaMalloc(&scratch, capacity);
    if (err != cudaSuccess) {
      scratch = nullptr;
      scratch_bytes = 0;
      (void)cudaGetLastError();
      throw BackendError(fmt::format(
          "nccl: cudaMalloc of a {}-byte scratch buffer failed on rank {} (device {}) at {}: "
          "{}",
          capacity, rank, ordinal, path, cudaGetErrorString(err)));
    }
    scratch_bytes = capacity;
    offset = 0;
  }
  scratch_used = offset + bytes;
  return bytesAt(scratch, offset);
}

// A copy of `in`, when needed, is enqueued on `target`, so it runs before the
// op that reads it.
const void* NcclBackend::State::separate(const void* in, std::size_t in_bytes, const void* out,
                                         std::size_t out_bytes, bool nccl_in_place,
                                         std::string_view path) {
  if (nccl_in_place || !overlaps(in, in_bytes, out, out_bytes)) return in;
  void* copy = scratchFor(in_bytes, path);
  copyOnStream(copy, in, in_bytes, path);
  return copy;
}

void NcclBackend::State::copyOnStream(void* dst, const void* src, std::size_t bytes,
                                      std::string_view path) {
  if (bytes == 0 || dst == src) return;
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, target);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw BackendError(fmt::format("nccl: cudaMemcpyAsync of {} bytes failed on rank {} at {}: {}",
                                   bytes, rank, path, cudaGetErrorString(err)));
  }
}

void NcclBackend::State::enqueue(const PostArgs& op) {
  const std::string_view path = op.path ? op.path : "";
  const nccl::TeamComm& t = teamOf(op, path);
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  const std::size_t n = static_cast<std::size_t>(t.size);
  const std::size_t me = static_cast<std::size_t>(t.rank);
  if (hasRoot(op.type))
    HIR_INTERNAL_ASSERT(op.root >= 0 && op.root < t.size,
                        "{}: nccl {} root {} is outside the team of {} rank(s)", path,
                        toString(op.type), op.root, t.size);
  if (isPointToPoint(op.type))
    HIR_INTERNAL_ASSERT(op.peer >= 0 && op.peer < world,
                        "{}: nccl {} peer {} is outside the world of {} rank(s)", path,
                        toString(op.type), op.peer, world);
  const bool is_root = hasRoot(op.type) && op.root == t.rank;

  switch (op.type) {
    case CommType::Allreduce: {
      const void* in =
          separate(op.input, chunk, op.output, chunk, op.input == op.output, path);
      HIR_NCCL_CHECK(ncclAllReduce(in, op.output, op.count, dt, ncclOp(op.reduce), t.comm, target),
                     rank, path);
      return;
    }
    case CommType::Allgather: {
      const void* in = separate(op.input, chunk, op.output, n * chunk,
                                op.input == bytesAt(op.output, me * chunk), path);
      HIR_NCCL_CHECK(ncclAllGather(in, op.output, op.count, dt, t.comm, target), rank, path);
      return;
    }
    case CommType::ReduceScatter: {
      const void* in = separate(op.input, n * chunk, op.output, chunk,
                                op.output == bytesAt(op.input, me * chunk), path);
      HIR_NCCL_CHECK(
          ncclReduceScatter(in, op.output, op.count, dt, ncclOp(op.reduce), t.comm, target),
          rank, path);
      return;
    }
    case CommType::Broadcast: {
      // Only the root reads its input; elsewhere pass the output (the
      // in-place form), so that a null input is never handed to NCCL.
      const void* in = is_root ? separate(op.input, chunk, op.output, chunk,
                                          op.input == op.output, path)
                               : op.output;
      HIR_NCCL_CHECK(ncclBroadcast(in, op.output, op.count, dt, op.root, t.comm, target), rank,
                     path);
      return;
    }
    case CommType::Reduce: {
      // Only the root writes its output; elsewhere it may be null.
      const void* in = is_root ? separate(op.input, chunk, op.output, chunk,
                                          op.input == op.output, path)
                               : op.input;
      void* out = op.output ? op.output : const_cast<void*>(op.input);
      HIR_NCCL_CHECK(
          ncclReduce(in, out, op.count, dt, ncclOp(op.reduce), op.root, t.comm, target), rank,
          path);
      return;
    }
    case CommType::Gather: return enqueueGather(op, t, path);
    case CommType::Scatter: return enqueueScatter(op, t, path);
    case CommType::Alltoall: return enqueueAlltoall(op, t, path);
    case CommType::Send:
      HIR_NCCL_CHECK(ncclSend(op.input, op.count, dt, op.peer, t.comm, target), rank, path);
      return;
    case CommType::Recv:
      HIR_NCCL_CHECK(ncclRecv(op.output, op.count, dt, op.peer, t.comm, target), rank, path);
      return;
  }
  HIR_INTERNAL_ASSERT(false, "{}: nccl: unhandled communication type {}", path,
                      static_cast<int>(op.type));
}

// Root receives every member's chunk at output + r * chunk, its own through
// a send/recv to itself (NCCL copies it inside the group's kernel, which a
// separate memcpy would serialize with); the others send.
void NcclBackend::State::enqueueGather(const PostArgs& op, const nccl::TeamComm& t,
                                       std::string_view path) {
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  nccl::Group group(rank, path);
  if (op.root != t.rank) {
    HIR_NCCL_CHECK(ncclSend(op.input, op.count, dt, op.root, t.comm, target), rank, path);
  } else {
    const std::size_t n = static_cast<std::size_t>(t.size);
    void* own = bytesAt(op.output, static_cast<std::size_t>(t.rank) * chunk);
    const void* in = separate(op.input, chunk, op.output, n * chunk, op.input == own, path);
    for (int r = 0; r < t.size; ++r) {
      void* dst = bytesAt(op.output, static_cast<std::size_t>(r) * chunk);
      if (r == t.rank) {
        if (in == dst) continue;  // in place
        HIR_NCCL_CHECK(ncclSend(in, op.count, dt, r, t.comm, target), rank, path);
      }
      HIR_NCCL_CHECK(ncclRecv(dst, op.count, dt, r, t.comm, target), rank, path);
    }
  }
  group.end();
}

// Root sends input + r * chunk to every member, itself included unless in
// place; the others receive.
void NcclBackend::State::enqueueScatter(const PostArgs& op, const nccl::TeamComm& t,
                                        std::string_view path) {
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  nccl::Group group(rank, path);
  if (op.root != t.rank) {
    HIR_NCCL_CHECK(ncclRecv(op.output, op.count, dt, op.root, t.comm, target), rank, path);
  } else {
    const std::size_t n = static_cast<std::size_t>(t.size);
    const std::size_t own = static_cast<std::size_t>(t.rank) * chunk;
    // An output that overlaps another member's chunk would be overwritten
    // while that chunk is sent: such an input is staged.
    const void* in = separate(op.input, n * chunk, op.output, chunk,
                              op.output == bytesAt(op.input, own), path);
    for (int r = 0; r < t.size; ++r) {
      const void* src = bytesAt(in, static_cast<std::size_t>(r) * chunk);
      if (r == t.rank) {
        if (src == op.output) continue;  // in place
        HIR_NCCL_CHECK(ncclRecv(op.output, op.count, dt, r, t.comm, target), rank, path);
      }
      HIR_NCCL_CHECK(ncclSend(src, op.count, dt, r, t.comm, target), rank, path);
    }
  }
  group.end();
}

// Every member sends input + r * chunk to r and receives r's chunk at
// output + r * chunk, itself included (as nccl-tests does). In place (or any
// overlap) reads from a staged copy of the input.
void NcclBackend::State::enqueueAlltoall(const PostArgs& op, const nccl::TeamComm& t,
                                         std::string_view path) {
  const ncclDataType_t dt = ncclType(op.dtype);
  const std::size_t chunk = op.count * dtypeSize(op.dtype);
  const std::size_t n = static_cast<std::size_t>(t.size);
  const void* in = separate(op.input, n * chunk, op.output, n * chunk, false, path);
  nccl::Group group(rank, path);
  for (int r = 0; r < t.size; ++r) {
    const std::size_t offset = static_cast<std::size_t>(r) * chunk;
    HIR_NCCL_CHECK(ncclSend(bytesAt(in, offset), op.count, dt, r, t.comm, target), rank, path);
    HIR_NCCL_CHECK(ncclRecv(bytesAt(op.output, offset), op.count, dt, r, t.comm, target), rank,
                   path);
  }
  group.end();
}

}  // namespace hir
