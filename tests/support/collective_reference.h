// The host reference that the backend tests check collectives against
// (tests/backends/*_mpitest.cc, *_gputest.cc): inputs seeded by (rank,
// iteration, index), the expected output of every communication type, dtype
// and reduce op, the buffer sizes and in-place layouts, and the matrix of
// cases. One backend differs from another only in how it averages (AvgRule).
#pragma once

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <hostir/backend.h>
#include <hostir/types.h>

namespace hir::test {

// Teams every backend of these tests is set up with:
//   0: the world;  1: {world-1, 0} (a strict subset from 3 ranks on, in
//   reverse order);  2: the world in reverse order.
std::vector<std::vector<int>> testTeams(int world);

// ------------------------------------------------------- reference values

// How a backend computes ReduceOp::Avg. Integers divide the exact sum and
// truncate under both rules.
enum class AvgRule {
  // The exact sum divided in the dtype's arithmetic (float for float16 and
  // bfloat16): the result is exact, compared with tolerance 0 (MPI).
  DivideInDType,
  // Floating dtypes pre-multiply by 1/n in the dtype; the reference divides
  // exactly and allows that rounding (tolerance()) (NCCL).
  ScaleByInverse,
};

// Not a possible result of any case (inputs and results are >= 0): for
// uint8, 255 is above every sum (<= 4 * 7) and product (<= 3^4).
double poison(DType t);

// Element i of world rank w's input in iteration `it`: small integers, exact
// in every dtype; sums and products stay exact in bfloat16 and below 255.
double inputValue(ReduceOp op, int w, int it, std::size_t i);

double combine(ReduceOp op, double a, double b);

// Reduction over the team of element i of every member's input.
double reduced(ReduceOp op, DType t, AvgRule avg, const std::vector<int>& team, int it,
               std::size_t i);

// How far a result may be from reduced(): non-zero only for a floating
// average under AvgRule::ScaleByInverse.
double tolerance(DType t, ReduceOp op, AvgRule avg);

// Writes v as element k (or elements 0..n-1) of a host buffer of dtype t.
void store(std::byte* base, DType t, std::size_t k, double v);
void fillWith(std::byte* base, DType t, std::size_t n, double v);

// ----------------------------------------------------- one collective case

struct Case {
  CommType type;
  DType dtype;
  ReduceOp reduce;
  bool in_place;
  int team;  // index into testTeams()
};

// The name of a parameterized test: e.g. allreduce_float32_sum_inplace_team1.
std::string caseName(const Case& c);

// gtest prints a failing parameter with this.
void PrintTo(const Case& c, std::ostream* os);

// Sizes in elements of one rank's input and output (the count is per chunk).
std::size_t inputElements(CommType t, std::size_t count, std::size_t size);
std::size_t outputElements(CommType t, std::size_t count, std::size_t size);

// Where the input lies inside the output (or the output inside the input)
// for the in-place form of a type, in elements: NCCL's layouts (alltoall in
// place: input == output).
struct InPlaceLayout {
  bool input_inside_output;  // else the output is inside the input
  std::size_t offset;        // elements
};
InPlaceLayout inPlaceLayout(CommType t, std::size_t count, int me);

// A rank's part in a case: its index in the team, the sizes of its input and
// output in elements, and their in-place layout.
struct Participation {
  int me;
  std::size_t in_n;
  std::size_t out_n;
  InPlaceLayout layout;
};
// nullopt when `rank` is not in the team: non-members skip a post, as the
// evaluator does.
std::optional<Participation> participation(const Case& c, const std::vector<int>& team,
                                           int rank, std::size_t count);

// The post of one iteration of a case (path /body/0).
PostArgs collectivePost(const Case& c, const void* input, void* output, std::size_t count,
                        int root);

// Expected output element k, or nullopt where the output must keep its
// previous content (non-roots of reduce and gather).
std::optional<double> expectedOutput(const Case& c, AvgRule avg, const std::vector<int>& team,
                                     int me, int root, int it, std::size_t count, std::size_t k);

// Compares the output of iteration `it` (before.size() elements of dtype
// c.dtype at `output`) with expectedOutput(), where it keeps its content with
// `before`. Reports the first three wrong elements as test failures and
// returns how many were wrong.
int countWrongElements(const Case& c, AvgRule avg, const std::vector<int>& team, int me,
                       int root, int it, std::size_t count, const std::byte* output,
                       const std::vector<double>& before);

// Every collective type x dtype x reduce op (Sum only where a type does not
// reduce) x in place or not x team.
std::vector<Case> allCases();

// A send or recv of `count` elements of `buffer` with `peer`, as the
// backends' send/recv tests post it (path /body/1 for sends, /body/2 for
// recvs).
PostArgs pointToPoint(CommType type, void* buffer, std::size_t count, int peer,
                      DType dtype = DType::Float32);

// The data message number `message` from `from` to `to` carries: distinct
// per sender, receiver, message and element.
std::vector<float> sentData(int from, int to, int message, std::size_t n);

}  // namespace hir::test
