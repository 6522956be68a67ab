// The plan-stepping core (see step.h).
#include "plan/step.h"

#include <algorithm>

#include "common/check.h"

namespace hir {

void evalLayout(const PlanAlloc& alloc, const int64_t* scalars, Layout& out) {
  const std::size_t dims = alloc.shape.size();
  out.shape.resize(dims);
  out.strides.resize(dims);
  int64_t elements = 1;
  for (std::size_t d = dims; d-- > 0;) {
    const int64_t e = alloc.shape[d].eval(scalars);
    HIR_CHECK(e >= 0, "'{}' has extent {} ({}) in dimension {}; extents are >= 0", alloc.name, e,
              alloc.shape[d].text(), d);
    out.shape[d] = e;
    out.strides[d] = elements;
    HIR_CHECK(!__builtin_mul_overflow(elements, e, &elements),
              "'{}' has more than 2^63 elements (dimension {} is {})", alloc.name, d, e);
  }
  int64_t bytes = 0;
  HIR_CHECK(!__builtin_mul_overflow(elements, static_cast<int64_t>(dtypeSize(alloc.dtype)), &bytes),
            "'{}' has {} elements of {}: more than 2^63 bytes", alloc.name, elements,
            toString(alloc.dtype));
  out.elements = elements;
  out.bytes = static_cast<std::size_t>(bytes);
}

RefSpan resolveRef(const PlanRef& ref, const Layout& layout, const int64_t* scalars) {
  const std::size_t dims = layout.shape.size();
  const std::size_t indexed = ref.select.size() + (ref.has_range ? 1 : 0);
  HIR_CHECK(indexed <= dims, "'{}' has {} indices but its tensor has {} dimensions", ref.text,
            indexed, dims);
  RefSpan span;
  std::size_t d = 0;
  for (; d < ref.select.size(); ++d) {
    const int64_t v = ref.select[d].eval(scalars);
    HIR_CHECK(v >= 0 && v < layout.shape[d], "index {} of '{}' is {}, outside [0, {})", d,
              ref.text, v, layout.shape[d]);
    // In bounds, so offset + the rest stays below the element count.
    span.offset += v * layout.strides[d];
  }
  span.count = d < dims ? layout.shape[d] * layout.strides[d] : 1;
  span.dims = static_cast<int>(dims - d);
  span.lead = d < dims ? layout.shape[d] : 1;
  if (ref.has_range) {
    const int64_t a = ref.range_begin.eval(scalars), b = ref.range_end.eval(scalars);
    HIR_CHECK(0 <= a && a <= b && b <= layout.shape[d],
              "range [{}:{}] of '{}' is outside [0, {}] (dim {}; expected 0 <= begin <= end <= {})",
              a, b, ref.text, layout.shape[d], d, layout.shape[d]);
    span.offset += a * layout.strides[d];
    span.count = (b - a) * layout.strides[d];
    span.lead = b - a;
  }
  return span;
}

int64_t refExtent(const PlanRef& ref, const Layout& layout, const RefSpan& span, int i) {
  return i == 0 ? span.lead : layout.shape[ref.select.size() + static_cast<std::size_t>(i)];
}

namespace {

std::string shapeText(const Operand& o) {
  std::string out;
  for (int i = 0; i < o.span.dims; ++i)
    out += fmt::format("{}{}", i ? " x " : "", refExtent(*o.ref, *o.layout, o.span, i));
  return out.empty() ? std::string("a scalar") : out;
}

}  // namespace

MatmulShape matmulShape(const instr::Matmul& mm, const Operand& a, const Operand& b,
                        const Operand& out) {
  for (const Operand* o : {&a, &b, &out})
    HIR_CHECK(o->span.dims == 2, "matmul needs 2-D operands; '{}' is {} ({}-D)", o->ref->text,
              shapeText(*o), o->span.dims);
  auto rows = [](const Operand& o) { return refExtent(*o.ref, *o.layout, o.span, 0); };
  auto cols = [](const Operand& o) { return refExtent(*o.ref, *o.layout, o.span, 1); };
  MatmulShape s;
  s.m = mm.transpose_a ? cols(a) : rows(a);
  s.k = mm.transpose_a ? rows(a) : cols(a);
  const int64_t kb = mm.transpose_b ? cols(b) : rows(b);
  s.n = mm.transpose_b ? rows(b) : cols(b);
  auto op = [](const Operand& o, bool t) {
    return fmt::format("'{}'{} ({})", o.ref->text, t ? " transposed" : "", shapeText(o));
  };
  HIR_CHECK(s.k == kb, "matmul of {} by {}: the inner sizes differ ({} vs {})",
            op(a, mm.transpose_a), op(b, mm.transpose_b), s.k, kb);
  HIR_CHECK(rows(out) == s.m && cols(out) == s.n,
            "matmul of {} by {} makes {} x {}, but out '{}' is {}", op(a, mm.transpose_a),
            op(b, mm.transpose_b), s.m, s.n, out.ref->text, shapeText(out));
  s.lda = cols(a);
  s.ldb = cols(b);
  s.ldo = cols(out);
  return s;
}

void checkAddShapes(const Operand& a, const Operand& b, const Operand& out) {
  for (const Operand* o : {&b, &out}) {
    bool same = o->span.dims == a.span.dims;
    for (int i = 0; same && i < a.span.dims; ++i)
      same = refExtent(*a.ref, *a.layout, a.span, i) == refExtent(*o->ref, *o->layout, o->span, i);
    HIR_CHECK(same, "add needs operands of one shape; '{}' is {} but '{}' is {}", a.ref->text,
              shapeText(a), o->ref->text, shapeText(*o));
  }
}

RandomPattern randomPattern(const instr::RandomFill& r, DType t, const int64_t* scalars) {
  RandomPattern p;
  p.seed = static_cast<uint64_t>(r.seed.eval(scalars));
  p.low = r.low.eval(scalars);
  p.high = r.high.eval(scalars);
  HIR_CHECK(p.low < p.high, "a random fill needs low < high; found [{}, {})", p.low, p.high);
  if (!isFloating(t))
    HIR_CHECK(p.low >= -0x1p63 && p.high < 0x1p63,
              "a random fill of {} takes bounds within int64; found [{}, {})", toString(t), p.low,
              p.high);
  return p;
}

Tolerance checkTolerance(const instr::Check& c, const int64_t* scalars) {
  const Tolerance tol(c.atol.eval(scalars), c.rtol.eval(scalars));
  HIR_CHECK(tol.atol >= 0 && tol.rtol >= 0,
            "a check's atol and rtol must be >= 0; found atol {}, rtol {}", tol.atol, tol.rtol);
  return tol;
}

void checkSameCount(std::string_view what, const Operand& a, const Operand& b) {
  HIR_CHECK(a.span.count == b.span.count,
            "{} needs the same number of elements on both sides; '{}' has {} but '{}' has {}",
            what, a.ref->text, a.span.count, b.ref->text, b.span.count);
}

void checkAliasing(const Instr& in, std::span<const ResolvedAccess> accesses) {
  const Aliasing rule = aliasingOf(in);
  if (rule == Aliasing::Free) return;
  for (const ResolvedAccess& w : accesses) {
    if (w.access != Access::Write || w.count == 0) continue;
    for (const ResolvedAccess& r : accesses) {
      if (r.access != Access::Read || r.count == 0 || r.ref->alloc != w.ref->alloc) continue;
      const bool overlap = r.offset < w.offset + w.count && w.offset < r.offset + r.count;
      if (!overlap) continue;
      const bool same = r.offset == w.offset && r.count == w.count;
      const std::string_view op = instrName(in);
      if (rule == Aliasing::Apart)
        throw ProgramError(fmt::format(
            "{} writes '{}', which overlaps its input '{}': each element it writes depends on "
            "many it reads, so its output needs a buffer of its own",
            op, w.ref->text, r.ref->text));
      if (!same)
        throw ProgramError(fmt::format(
            "{} writes '{}' (elements [{}, {}) of its allocation), which partly overlaps its "
            "input '{}' (elements [{}, {})): the result would depend on the order elements are "
            "written; write in place (the same elements) or to a buffer apart",
            op, w.ref->text, w.offset, w.offset + w.count, r.ref->text, r.offset,
            r.offset + r.count));
    }
  }
}

int64_t chunkCount(const PlanComm& c, int64_t team_size, int64_t in, int64_t out) {
  const int64_t T = team_size;
  // "the <side> needs team size T x <other> n = T*n elements", or nothing
  // when `have` is that product.
  auto timesTeam = [&](std::string_view side, std::string_view other, int64_t n,
                       int64_t have) -> std::string {
    int64_t product = 0;
    if (__builtin_mul_overflow(T, n, &product))
      return fmt::format("the {} needs team size {} x {} {} elements, more than 2^63", side, T,
                         other, n);
    if (have == product) return {};
    return fmt::format("the {} needs team size {} x {} {} = {} elements", side, T, other, n,
                       product);
  };
  std::string need;
  int64_t count = 0;
  switch (c.type) {
    case CommType::Allgather:
    case CommType::Gather:
      count = in;
      need = timesTeam("output", "input", in, out);
      break;
    case CommType::ReduceScatter:
    case CommType::Scatter:
      count = out;
      need = timesTeam("input", "output", out, in);
      break;
    case CommType::Allreduce:
    case CommType::Broadcast:
    case CommType::Reduce:
      count = in;
      if (in != out) need = "input and output need the same number of elements";
      break;
    case CommType::Alltoall:
      count = in / T;
      if (in != out)
        need = "input and output need the same number of elements";
      else if (in % T != 0)
        need = fmt::format("the input needs a multiple of team size {} elements", T);
      break;
    case CommType::Send:
      return in;
    case CommType::Recv:
      return out;
  }
  HIR_CHECK(need.empty(), "{} '{}' has input '{}' of {} elements and output '{}' of {} elements; {}",
            toString(c.type), c.name, c.input->text, in, c.output->text, out, need);
  return count;
}

int peerRank(const PlanComm& c, int world, const int64_t* scalars) {
  HIR_INTERNAL_ASSERT(c.peer.has_value(), "send/recv '{}' without a peer", c.name);
  const int64_t peer = c.peer->eval(scalars);
  HIR_CHECK(peer >= 0 && peer < world, "peer {} evaluates to {}, outside the world [0, {})",
            c.peer->text(), peer, world);
  return static_cast<int>(peer);
}

int teamRankOf(const PlanTeam& team, int64_t rank) {
  auto it = std::find(team.ranks.begin(), team.ranks.end(), rank);
  return it == team.ranks.end() ? -1 : static_cast<int>(it - team.ranks.begin());
}

CollectiveShape collectiveShape(const PlanComm& c, const PlanTeam& team, int rank, DType dtype,
                                std::size_t count, int root, bool in_place) {
  CollectiveShape shape;
  shape.type = c.type;
  shape.dtype = dtype;
  shape.count = count;
  shape.team_size = static_cast<int>(team.ranks.size());
  shape.me = teamRankOf(team, rank);
  shape.root = root;
  shape.in_place = in_place;
  return shape;
}

std::string teamName(const PlanTeam& team) {
  std::string ranks;
  for (int m : team.ranks) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", m);
  return fmt::format("team [{}]", ranks);
}

int rootTeamRank(const PlanComm& c, const PlanTeam& team, const int64_t* scalars) {
  HIR_INTERNAL_ASSERT(c.root.has_value(), "{} '{}' without a root", toString(c.type), c.name);
  const int64_t root = c.root->eval(scalars);
  const int r = teamRankOf(team, root);
  HIR_CHECK(r >= 0, "root {} evaluates to {}, which is not a member of {}", c.root->text(), root,
            teamName(team));
  return r;
}

int streamIndex(const CompiledExpr& e, const int64_t* scalars) {
  const int64_t k = e.eval(scalars);
  HIR_CHECK(k >= 0 && k < kMaxStreams, "stream {} evaluates to {}, outside [0, {})", e.text(), k,
            kMaxStreams);
  return static_cast<int>(k);
}

bool isControl(const Instr& in) {
  return std::holds_alternative<instr::LoopInit>(in.op) ||
         std::holds_alternative<instr::LoopNext>(in.op) ||
         std::holds_alternative<instr::JumpIfZero>(in.op) ||
         std::holds_alternative<instr::Jump>(in.op);
}

namespace detail {

int loopInit(const instr::LoopInit& l, int pc, int64_t* scalars) {
  const int64_t start = l.start.eval(scalars);
  const int64_t stop = l.stop.eval(scalars);
  const int64_t step = l.step.eval(scalars);
  HIR_CHECK(step > 0, "loop step {} evaluates to {}; a loop step must be positive", l.step.text(),
            step);
  scalars[l.slot] = start;
  scalars[l.stop_slot] = stop;
  scalars[l.step_slot] = step;
  return start < stop ? pc + 1 : l.exit;
}

// An index that would pass 2^63 - 1 is past any stop: the loop ends there
// instead of wrapping to a negative index and running forever.
int loopNext(const instr::LoopNext& l, int pc, int64_t* scalars) {
  int64_t next = 0;
  if (__builtin_add_overflow(scalars[l.slot], scalars[l.step_slot], &next)) return pc + 1;
  scalars[l.slot] = next;
  return next < scalars[l.stop_slot] ? l.body : pc + 1;
}

}  // namespace detail
}  // namespace hir
