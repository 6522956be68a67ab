// Building programs in C++ without JSON (for compilers that embed hostir).
// A program built here equals the one loaded from the equivalent JSON.
//
//   ProgramBuilder b("ring");
//   b.param("n", 1024).output("buf");
//   b.allocate("buf", DType::Float32, {"world", "n"});
//   b.fill("buf[rank]", "rank * 1000", 1);
//   b.forLoop("i", 0, "world - 1", [&](BodyBuilder& l) {
//     l.send("s", "buf[(rank - i + world) % world]", "(rank + 1) % world");
//     ...
//   });
//
// Expressions are Expr (an integer, or text that is parsed); tensor
// references are text. Syntax errors throw ParseError.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/program.h>

namespace hir {

struct CommOptions {
  std::optional<std::vector<Expr>> team = std::nullopt;  // nullopt: all ranks
  std::string backend = "auto";
  Protocol protocol = Protocol::Auto;
};

struct MatmulOptions {
  bool transpose_a = false, transpose_b = false, accumulate = false;
};

class BodyBuilder {
 public:
  explicit BodyBuilder(Body& body) : body_(&body) {}

  BodyBuilder& allocate(std::string name, DType dtype, std::vector<Expr> shape);
  BodyBuilder& deallocate(std::string name);
  BodyBuilder& allgather(std::string name, std::string_view input, std::string_view output,
                         CommOptions opts = {});
  BodyBuilder& allreduce(std::string name, std::string_view input, std::string_view output,
                         ReduceOp op, CommOptions opts = {});
  BodyBuilder& reduceScatter(std::string name, std::string_view input, std::string_view output,
                             ReduceOp op, CommOptions opts = {});
  BodyBuilder& broadcast(std::string name, std::string_view input, std::string_view output,
                         Expr root, CommOptions opts = {});
  BodyBuilder& reduce(std::string name, std::string_view input, std::string_view output,
                      Expr root, ReduceOp op, CommOptions opts = {});
  BodyBuilder& gather(std::string name, std::string_view input, std::string_view output,
                      Expr root, CommOptions opts = {});
  BodyBuilder& scatter(std::string name, std::string_view input, std::string_view output,
                       Expr root, CommOptions opts = {});
  BodyBuilder& alltoall(std::string name, std::string_view input, std::string_view output,
                        CommOptions opts = {});
  BodyBuilder& send(std::string name, std::string_view tensor, Expr peer, CommOptions opts = {});
  BodyBuilder& recv(std::string name, std::string_view tensor, Expr peer, CommOptions opts = {});
  BodyBuilder& shareMemHandles(std::vector<std::string> communications);
  BodyBuilder& wait(std::string communication, WaitMode mode = WaitMode::Stream);
  BodyBuilder& forLoop(std::string index, Expr start, Expr stop,
                       const std::function<void(BodyBuilder&)>& body, Expr step = 1);
  BodyBuilder& ifThen(Expr cond, const std::function<void(BodyBuilder&)>& then_body,
                      const std::function<void(BodyBuilder&)>& else_body = nullptr);
  BodyBuilder& setStream(Expr stream);
  BodyBuilder& syncStream(Expr stream);
  BodyBuilder& group(std::string name, const std::function<void(BodyBuilder&)>& body);
  BodyBuilder& fill(std::string_view tensor, Expr value, Expr step = 0);
  BodyBuilder& copy(std::string_view src, std::string_view dst);
  BodyBuilder& check(std::string_view tensor, Expr value, Expr step = 0, double tolerance = 0.0);
  // out (+)= op(a) * op(b) (the "matmul" node).
  BodyBuilder& matmul(std::string_view a, std::string_view b, std::string_view out,
                      MatmulOptions opts = {});
  // out = a + b, elementwise (the "add" node).
  BodyBuilder& addTensors(std::string_view a, std::string_view b, std::string_view out);
  // Uniform random values of `seed` in [low, high) (a fill with "random").
  BodyBuilder& fillRandom(std::string_view tensor, Expr seed, Real low = 0.0, Real high = 1.0);
  // tensor against `expected` within atol + rtol * |expected| (a check with
  // "expected").
  BodyBuilder& checkClose(std::string_view tensor, std::string_view expected, Real rtol = 0.0,
                          Real atol = 0.0);
  // output = f(input) (the "relu", "gelu", "silu", "scale" and "cast" nodes).
  BodyBuilder& relu(std::string_view input, std::string_view output);
  BodyBuilder& gelu(std::string_view input, std::string_view output);
  BodyBuilder& silu(std::string_view input, std::string_view output);
  BodyBuilder& scale(std::string_view input, std::string_view output, Real factor);
  BodyBuilder& cast(std::string_view input, std::string_view output);
  // A kernel registered as `name` (hostir/kernel.h).
  BodyBuilder& kernel(std::string name, const std::vector<std::string>& reads,
                      const std::vector<std::string>& writes,
                      std::vector<std::pair<std::string, Expr>> args = {});
  // Appends any node as it is.
  BodyBuilder& add(Node node);

 private:
  Body* body_;
};

namespace detail {
struct ProgramHolder {  // constructed before BodyBuilder, which points into it
  Program program_;
};
}  // namespace detail

class ProgramBuilder : private detail::ProgramHolder, public BodyBuilder {
 public:
  explicit ProgramBuilder(std::string name);
  // The base BodyBuilder points into this object's program: no copies.
  ProgramBuilder(const ProgramBuilder&) = delete;
  ProgramBuilder& operator=(const ProgramBuilder&) = delete;
  ProgramBuilder& param(std::string name, int64_t value);
  ProgramBuilder& worldSize(int64_t world);
  ProgramBuilder& minWorldSize(int64_t world);
  ProgramBuilder& input(std::string name);
  ProgramBuilder& output(std::string name);
  const Program& program() const { return program_; }
  Program build() const { return program_; }
};

}  // namespace hir
