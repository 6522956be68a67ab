// The nodes of the host IR. Each node is plain data; its comment says what it
// means. Cross-references (a tensor, a communication) are names here and
// become slots after lowering (plan/plan.h).
//
// HIR_NODE_KINDS is the one list of node kinds. It generates NodeKind, the
// JSON op names and the std::variant `Node::Variant`, so a new node kind
// breaks the build in every pass that dispatches with std::visit.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <hostir/types.h>
#include <hostir/expr.h>
#include <hostir/tensor_ref.h>

namespace hir {

// X(Type, "json op")
#define HIR_NODE_KINDS(X)                  \
  X(Allocate, "allocate")                  \
  X(Deallocate, "deallocate")              \
  X(Communication, "communication")        \
  X(ShareMemHandles, "share_mem_handles")  \
  X(Wait, "wait")                          \
  X(ForLoop, "for")                        \
  X(If, "if")                              \
  X(SetStream, "set_stream")               \
  X(SyncStream, "sync_stream")             \
  X(Group, "group")                        \
  X(Fill, "fill")                          \
  X(Copy, "copy")                          \
  X(Check, "check")                        \
  X(Matmul, "matmul")                      \
  X(Add, "add")                            \
  X(Relu, "relu")                          \
  X(Gelu, "gelu")                          \
  X(Silu, "silu")                          \
  X(Scale, "scale")                        \
  X(Cast, "cast")                          \
  X(Kernel, "kernel")

struct Node;
using Body = std::vector<Node>;

// A real number of the program: a JSON number, or an int64 expression
// (non-empty `expr`) evaluated when the node runs.
struct Real {
  double number = 0.0;
  Expr expr;
  Real() = default;
  Real(double n) : number(n) {}  // NOLINT: implicit from a number
  explicit Real(Expr e) : expr(std::move(e)) {}
  bool isExpr() const { return !expr.empty(); }
  friend bool operator==(const Real&, const Real&) = default;
};

// Allocates a tensor of `dtype` and `shape` (row-major) on the rank's device,
// named `name` until a Deallocate. Shape extents are evaluated when the node
// runs. If `name` is a program input or output that the caller bound, the
// caller's buffer is used instead. Memory is cached per Allocate node across
// runs, so every run sees the same address.
struct Allocate {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<Expr> shape;
  friend bool operator==(const Allocate&, const Allocate&) = default;
};

// Ends the lifetime of a tensor. Memory still used by a pending communication
// is released only after that communication completes.
struct Deallocate {
  std::string name;
  friend bool operator==(const Deallocate&, const Deallocate&) = default;
};

// Which ranks take part in a collective: every rank, or the listed ranks in
// team order (team rank i is ranks[i]). Rank lists may use world and params,
// never rank or loop indices: teams are fixed at load.
struct Team {
  bool all = true;
  std::vector<Expr> ranks;
  friend bool operator==(const Team&, const Team&) = default;
};

// Posts a communication; never blocks the host. Collectives read `input` and
// write `output` (same reference for in place, where NCCL allows it); `root`
// is an absolute rank; ranks outside `team` skip the node. send/recv move
// `tensor` to/from the absolute rank `peer`. Inputs become ready on the
// current stream; completion is observed by a Wait on `name` (or on the
// enclosing Group). `backend` is "auto" or the name of a registered backend
// (hostir/backend.h); `protocol` applies to send/recv on a backend that takes
// protocols (ipc).
struct Communication {
  std::string name;
  CommType type = CommType::Allreduce;
  std::optional<TensorRef> input, output;  // collectives
  std::optional<TensorRef> tensor;         // send / recv
  std::optional<Expr> peer;                // send / recv
  std::optional<Expr> root;                // broadcast, reduce, gather, scatter
  Team team;
  std::optional<ReduceOp> reduce;          // allreduce, reduce_scatter, reduce
  std::string backend = "auto";
  Protocol protocol = Protocol::Auto;
  friend bool operator==(const Communication&, const Communication&) = default;
};

// Exchanges, in one batch through the bootstrap, what the listed IPC
// communications need (memory handles, semaphores). Cached: exchanging the
// same keys again does nothing.
struct ShareMemHandles {
  std::vector<std::string> communications;
  friend bool operator==(const ShareMemHandles&, const ShareMemHandles&) = default;
};

// Waits for the latest post of a communication or group. Stream mode: the
// current stream waits on its completion event and the host goes on. Host
// mode: the host blocks until it completes (with the run's timeout).
struct Wait {
  std::string communication;
  WaitMode mode = WaitMode::Stream;
  friend bool operator==(const Wait&, const Wait&) = default;
};

// Runs `body` with `index` = start, start + step, ... while index < stop.
// start and stop are evaluated once, on entry. `index` is visible in body only.
struct ForLoop {
  std::string index;
  Expr start = Expr(int64_t{0});
  Expr stop;
  Expr step = Expr(int64_t{1});
  Body body;
  bool operator==(const ForLoop&) const;
};

// Runs `then_body` if `cond` is non-zero, else `else_body` (rank-dependent
// control flow; every rank must still agree on its communications).
struct If {
  Expr cond;
  Body then_body;
  Body else_body;
  bool operator==(const If&) const;
};

// Streams a program may use: set_stream/sync_stream take 0..kMaxStreams-1.
inline constexpr int kMaxStreams = 16;

// Makes stream `stream` current: following nodes enqueue work on it.
// Stream 0 is the default stream (the caller's stream when embedded).
struct SetStream {
  Expr stream;
  friend bool operator==(const SetStream&, const SetStream&) = default;
};

// Makes the current stream wait for everything enqueued so far on `stream`.
struct SyncStream {
  Expr stream;
  friend bool operator==(const SyncStream&, const SyncStream&) = default;
};

// Posts the communications of `body` as one unit (one NCCL group) with one
// completion handle, waited on by the name `name`. The body holds
// communications, and for/if around them, nothing else.
struct Group {
  std::string name;
  Body body;
  bool operator==(const Group&) const;
};

// Uniform values in [low, high), a function of `seed` and of the element's
// index in the reference only (common/random.h): the same on every rank and
// device for the same seed. Integer dtypes take whole low and high.
struct RandomFill {
  Expr seed;
  Real low = 0.0, high = 1.0;
  friend bool operator==(const RandomFill&, const RandomFill&) = default;
};

// Writes element k of `tensor` := value + step * k, or the random pattern
// when `random` is set (then value is empty), on the current stream.
struct Fill {
  TensorRef tensor;
  Expr value;
  Expr step = Expr(int64_t{0});
  std::optional<RandomFill> random;
  friend bool operator==(const Fill&, const Fill&) = default;
};

// Copies `src` into `dst` (equal sizes and dtypes) on the current stream.
struct Copy {
  TensorRef src, dst;
  friend bool operator==(const Copy&, const Copy&) = default;
};

// Verifies, on the current stream, element k of `tensor` against value +
// step * k, or against element k of `expected` (any dtype, the same number
// of elements; then value is empty): |got - e| <= atol + rtol * |e|.
// `tolerance` is atol's older name (one of the two may be set). Mismatches
// (rank, tensor, index, got, expected) are reported after the run and make
// `hir run` exit 1.
struct Check {
  TensorRef tensor;
  Expr value;
  Expr step = Expr(int64_t{0});
  double tolerance = 0.0;
  std::optional<TensorRef> expected;
  Real rtol = 0.0, atol = 0.0;
  friend bool operator==(const Check&, const Check&) = default;
};

// out[m, n] = op(a)[m, k] * op(b)[k, n], or out += that when `accumulate`,
// on the current stream, where op(x) is x transposed when transpose_x. a, b
// and out reference 2-D tensors (a range of the leading dimension is fine)
// of one dtype, float32, float16 or bfloat16; products are summed in
// float32. cuBLAS on the cuda device, OpenBLAS on the host. Like every node,
// it reads a and b (and out when accumulating) and writes out only after the
// work enqueued before it on the current stream, and a pending communication
// on those buffers is a hazard.
struct Matmul {
  TensorRef a, b, out;
  bool transpose_a = false, transpose_b = false, accumulate = false;
  friend bool operator==(const Matmul&, const Matmul&) = default;
};

// out[i] = a[i] + b[i] on the current stream: references of the same shape
// and dtype (out may be a or b). For reductions written by hand.
struct Add {
  TensorRef a, b, out;
  friend bool operator==(const Add&, const Add&) = default;
};

// output[i] = f(input[i]) on the current stream, for references with the
// same number of elements; output is input itself or apart from it. relu,
// gelu (tanh approximation), silu and scale (x * factor) take one floating
// dtype for both; cast converts between any two dtypes (the references'
// dtypes say which). Device::unary says how each computes and rounds.
template <UnaryOp Op>
struct Elementwise {
  static constexpr UnaryOp op = Op;
  TensorRef input, output;
  Real factor = 1.0;  // scale only
  friend bool operator==(const Elementwise&, const Elementwise&) = default;
};
using Relu = Elementwise<UnaryOp::Relu>;
using Gelu = Elementwise<UnaryOp::Gelu>;
using Silu = Elementwise<UnaryOp::Silu>;
using Scale = Elementwise<UnaryOp::Scale>;
using Cast = Elementwise<UnaryOp::Cast>;

// Runs the kernel an embedder registered as `name` (hostir/kernel.h) on the
// current stream, with the buffers of `reads` and `writes` resolved and the
// `args` evaluated. The kernel touches only what `reads` and `writes` list:
// the checks and the dependencies go by those lists.
inline constexpr int kMaxKernelTensors = 16;  // reads + writes of one kernel node

struct Kernel {
  std::string name;
  std::vector<TensorRef> reads, writes;
  std::vector<std::pair<std::string, Expr>> args;  // sorted by name
  friend bool operator==(const Kernel&, const Kernel&) = default;
};

enum class NodeKind : uint8_t {
#define HIR_X(Type, op) Type,
  HIR_NODE_KINDS(HIR_X)
#undef HIR_X
};

inline constexpr std::string_view kNodeOpNames[] = {
#define HIR_X(Type, op) op,
    HIR_NODE_KINDS(HIR_X)
#undef HIR_X
};

namespace detail {
// Builds std::variant<A, B, ...> from the pack "A, B, ..., void" that the
// X-macro expands to (the trailing void absorbs the last comma).
template <class... Acc>
struct TypeList {};
template <class List, class... Ts>
struct VariantOfList;
template <class... Acc>
struct VariantOfList<TypeList<Acc...>, void> {
  using type = std::variant<Acc...>;
};
template <class... Acc, class T, class... Ts>
struct VariantOfList<TypeList<Acc...>, T, Ts...> {
  using type = typename VariantOfList<TypeList<Acc..., T>, Ts...>::type;
};
}  // namespace detail

struct Node {
#define HIR_X(Type, op) Type,
  using Variant = typename detail::VariantOfList<detail::TypeList<>, HIR_NODE_KINDS(HIR_X) void>::type;
#undef HIR_X
  Variant v;

  Node() = default;
  template <class T>
  Node(T n) : v(std::move(n)) {}  // NOLINT: implicit from any node struct
  NodeKind kind() const { return static_cast<NodeKind>(v.index()); }
  std::string_view op() const { return kNodeOpNames[v.index()]; }
  friend bool operator==(const Node&, const Node&) = default;
};

inline bool ForLoop::operator==(const ForLoop& o) const {
  return index == o.index && start == o.start && stop == o.stop && step == o.step &&
         body == o.body;
}
inline bool If::operator==(const If& o) const {
  return cond == o.cond && then_body == o.then_body && else_body == o.else_body;
}
inline bool Group::operator==(const Group& o) const { return name == o.name && body == o.body; }

// A whole program (format hostir/1).
struct Param {
  std::string name;
  int64_t value = 0;
  friend bool operator==(const Param&, const Param&) = default;
};

struct Program {
  std::string name;
  std::optional<int64_t> world_size;      // runs only at this world size
  std::optional<int64_t> min_world_size;  // runs only at this world size or more
  std::vector<Param> params;          // in file order
  std::vector<std::string> inputs;    // allocations a caller may bind
  std::vector<std::string> outputs;
  Body body;
  friend bool operator==(const Program&, const Program&) = default;
};

// The JSON pointer of child `i` of a body at `parent` ("" for the top):
// childPath("", "body", 2) == "/body/2".
std::string childPath(std::string_view parent, std::string_view field, std::size_t i);

}  // namespace hir
