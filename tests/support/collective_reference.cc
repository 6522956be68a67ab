#include "support/collective_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/elements.h"

namespace hir::test {

std::vector<std::vector<int>> testTeams(int world) {
  std::vector<int> all(world), reversed(world);
  for (int r = 0; r < world; ++r) {
    all[r] = r;
    reversed[r] = world - 1 - r;
  }
  std::vector<int> pair = world == 1 ? std::vector<int>{0} : std::vector<int>{world - 1, 0};
  return {all, pair, reversed};
}

// ------------------------------------------------------- reference values

double poison(DType t) { return t == DType::UInt8 ? 255 : -77; }

double inputValue(ReduceOp op, int w, int it, std::size_t i) {
  if (op == ReduceOp::Prod) return 1 + static_cast<double>((w + it + i) % 3);
  return static_cast<double>((static_cast<std::size_t>(w) * 5 + it * 3 + i) % 8);
}

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
  }
  return 0;
}

namespace {

// The average of an exact sum >= 0 under `avg`.
double average(DType t, AvgRule avg, double sum, int n) {
  // Exact here; tolerance() allows NCCL's rounding.
  if (avg == AvgRule::ScaleByInverse && isFloating(t)) return sum / n;
  switch (t) {
    case DType::Float32: return static_cast<float>(sum) / static_cast<float>(n);
    case DType::Float64: return sum / n;
    case DType::Float16: return halfToFloat(floatToHalf(static_cast<float>(sum) / n));
    case DType::BFloat16: return bfloat16ToFloat(floatToBFloat16(static_cast<float>(sum) / n));
    case DType::Int32:
    case DType::Int64:
    case DType::UInt8: return static_cast<double>(static_cast<int64_t>(sum) / n);
  }
  return 0;
}

}  // namespace

double reduced(ReduceOp op, DType t, AvgRule avg, const std::vector<int>& team, int it,
               std::size_t i) {
  double acc = inputValue(op, team[0], it, i);
  for (std::size_t j = 1; j < team.size(); ++j)
    acc = combine(op, acc, inputValue(op, team[j], it, i));
  return op == ReduceOp::Avg ? average(t, avg, acc, static_cast<int>(team.size())) : acc;
}

double tolerance(DType t, ReduceOp op, AvgRule avg) {
  if (op != ReduceOp::Avg || avg != AvgRule::ScaleByInverse || !isFloating(t)) return 0;
  switch (t) {
    case DType::Float16:
    case DType::BFloat16: return 0.05;
    case DType::Float32: return 1e-5;
    default: return 1e-12;
  }
}

void store(std::byte* base, DType t, std::size_t k, double v) {
  storeElement(base, t, k, PatternElement{static_cast<int64_t>(v), v});
}

void fillWith(std::byte* base, DType t, std::size_t n, double v) {
  for (std::size_t k = 0; k < n; ++k) store(base, t, k, v);
}

// ----------------------------------------------------- one collective case

std::string caseName(const Case& c) {
  std::string name = fmt::format("{}_{}", toString(c.type), toString(c.dtype));
  if (hasReduceOp(c.type)) name += fmt::format("_{}", toString(c.reduce));
  name += c.in_place ? "_inplace" : "_outofplace";
  name += fmt::format("_team{}", c.team);
  return name;
}

void PrintTo(const Case& c, std::ostream* os) { *os << caseName(c); }

std::size_t inputElements(CommType t, std::size_t count, std::size_t size) {
  switch (t) {
    case CommType::ReduceScatter:
    case CommType::Scatter:
    case CommType::Alltoall: return count * size;
    default: return count;
  }
}

std::size_t outputElements(CommType t, std::size_t count, std::size_t size) {
  switch (t) {
    case CommType::Allgather:
    case CommType::Gather:
    case CommType::Alltoall: return count * size;
    default: return count;
  }
}

InPlaceLayout inPlaceLayout(CommType t, std::size_t count, int me) {
  switch (t) {
    case CommType::Allgather:
    case CommType::Gather: return {true, count * me};
    case CommType::ReduceScatter:
    case CommType::Scatter: return {false, count * me};
    default: return {true, 0};
  }
}

std::optional<Participation> participation(const Case& c, const std::vector<int>& team,
                                           int rank, std::size_t count) {
  auto pos = std::find(team.begin(), team.end(), rank);
  if (pos == team.end()) return std::nullopt;
  const int me = static_cast<int>(pos - team.begin());
  return Participation{me, inputElements(c.type, count, team.size()),
                       outputElements(c.type, count, team.size()),
                       inPlaceLayout(c.type, count, me)};
}

PostArgs collectivePost(const Case& c, const void* input, void* output, std::size_t count,
                        int root) {
  PostArgs a;
  a.type = c.type;
  a.dtype = c.dtype;
  a.reduce = c.reduce;
  a.input = input;
  a.output = output;
  a.count = count;
  a.team = c.team;
  a.root = root;
  a.path = "/body/0";
  return a;
}

std::optional<double> expectedOutput(const Case& c, AvgRule avg, const std::vector<int>& team,
                                     int me, int root, int it, std::size_t count, std::size_t k) {
  const std::size_t chunk = k / count, within = k % count;
  switch (c.type) {
    case CommType::Allgather: return inputValue(c.reduce, team[chunk], it, within);
    case CommType::Allreduce: return reduced(c.reduce, c.dtype, avg, team, it, k);
    case CommType::ReduceScatter: return reduced(c.reduce, c.dtype, avg, team, it, me * count + k);
    case CommType::Broadcast: return inputValue(c.reduce, team[root], it, k);
    case CommType::Reduce:
      if (me != root) return std::nullopt;
      return reduced(c.reduce, c.dtype, avg, team, it, k);
    case CommType::Gather:
      if (me != root) return std::nullopt;
      return inputValue(c.reduce, team[chunk], it, within);
    case CommType::Scatter: return inputValue(c.reduce, team[root], it, me * count + k);
    case CommType::Alltoall: return inputValue(c.reduce, team[chunk], it, me * count + within);
    case CommType::Send:
    case CommType::Recv: break;
  }
  return std::nullopt;
}

int countWrongElements(const Case& c, AvgRule avg, const std::vector<int>& team, int me,
                       int root, int it, std::size_t count, const std::byte* output,
                       const std::vector<double>& before) {
  const double tol = tolerance(c.dtype, c.reduce, avg);
  int wrong = 0;
  for (std::size_t k = 0; k < before.size(); ++k) {
    std::optional<double> want = expectedOutput(c, avg, team, me, root, it, count, k);
    const double expected = want ? *want : before[k];
    const double got = loadAsDouble(output, c.dtype, k);
    const bool ok = got == expected || std::fabs(got - expected) <= tol;
    if (!ok && ++wrong <= 3)
      ADD_FAILURE() << caseName(c) << ": iteration " << it << ", root " << root << ", element "
                    << k << ": got " << got << ", expected " << expected;
  }
  return wrong;
}

// ------------------------------------------------------- the full matrix

std::vector<Case> allCases() {
  const CommType types[] = {CommType::Allgather, CommType::Allreduce, CommType::ReduceScatter,
                            CommType::Broadcast, CommType::Reduce,    CommType::Gather,
                            CommType::Scatter,   CommType::Alltoall};
  std::vector<Case> cases;
  for (CommType type : types)
    for (const auto& [dtype, dname] : kDTypeNames)
      for (const auto& [op, oname] : kReduceOpNames) {
        if (!hasReduceOp(type) && op != ReduceOp::Sum) continue;
        for (bool in_place : {false, true})
          for (int team : {0, 1, 2}) cases.push_back({type, dtype, op, in_place, team});
      }
  return cases;
}

PostArgs pointToPoint(CommType type, void* buffer, std::size_t count, int peer, DType dtype) {
  PostArgs a;
  a.type = type;
  a.dtype = dtype;
  a.input = buffer;
  a.output = buffer;
  a.count = count;
  a.peer = peer;
  a.path = type == CommType::Send ? "/body/1" : "/body/2";
  return a;
}

std::vector<float> sentData(int from, int to, int message, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t k = 0; k < n; ++k)
    v[k] = static_cast<float>(from * 100000 + to * 10000 + message * 1000 + k % 997);
  return v;
}

}  // namespace hir::test
