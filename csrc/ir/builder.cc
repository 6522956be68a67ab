#include <hostir/builder.h>

#include <algorithm>

namespace hir {

namespace {

constexpr std::string_view kBuilderPointer = "(builder)";

TensorRef ref(std::string_view text) { return TensorRef::parse(text, kBuilderPointer); }

// The fields every communication sets, as the JSON loader fills them.
Communication communication(std::string name, CommType type, const CommOptions& opts) {
  Communication c;
  c.name = std::move(name);
  c.type = type;
  if (opts.team) c.team = Team{false, *opts.team};
  c.backend = opts.backend;
  c.protocol = opts.protocol;
  return c;
}

Communication collective(std::string name, CommType type, std::string_view input,
                         std::string_view output, const CommOptions& opts) {
  Communication c = communication(std::move(name), type, opts);
  c.input = ref(input);
  c.output = ref(output);
  return c;
}

Communication pointToPoint(std::string name, CommType type, std::string_view tensor, Expr peer,
                           const CommOptions& opts) {
  Communication c = communication(std::move(name), type, opts);
  c.tensor = ref(tensor);
  c.peer = std::move(peer);
  return c;
}

// Builds a nested body with a fresh BodyBuilder (absent function: empty body).
Body buildBody(const std::function<void(BodyBuilder&)>& fn) {
  Body body;
  if (fn) {
    BodyBuilder b(body);
    fn(b);
  }
  return body;
}

}  // namespace

BodyBuilder& BodyBuilder::add(Node node) {
  body_->push_back(std::move(node));
  return *this;
}

BodyBuilder& BodyBuilder::allocate(std::string name, DType dtype, std::vector<Expr> shape) {
  return add(Allocate{std::move(name), dtype, std::move(shape)});
}

BodyBuilder& BodyBuilder::deallocate(std::string name) { return add(Deallocate{std::move(name)}); }

BodyBuilder& BodyBuilder::allgather(std::string name, std::string_view input,
                                    std::string_view output, CommOptions opts) {
  return add(collective(std::move(name), CommType::Allgather, input, output, opts));
}

BodyBuilder& BodyBuilder::allreduce(std::string name, std::string_view input,
                                    std::string_view output, ReduceOp op, CommOptions opts) {
  Communication c = collective(std::move(name), CommType::Allreduce, input, output, opts);
  c.reduce = op;
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::reduceScatter(std::string name, std::string_view input,
                                        std::string_view output, ReduceOp op, CommOptions opts) {
  Communication c = collective(std::move(name), CommType::ReduceScatter, input, output, opts);
  c.reduce = op;
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::broadcast(std::string name, std::string_view input,
                                    std::string_view output, Expr root, CommOptions opts) {
  Communication c = collective(std::move(name), CommType::Broadcast, input, output, opts);
  c.root = std::move(root);
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::reduce(std::string name, std::string_view input, std::string_view output,
                                 Expr root, ReduceOp op, CommOptions opts) {
  Communication c = collective(std::move(name), CommType::Reduce, input, output, opts);
  c.root = std::move(root);
  c.reduce = op;
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::gather(std::string name, std::string_view input, std::string_view output,
                                 Expr root, CommOptions opts) {
  Communication c = collective(std::move(name), CommType::Gather, input, output, opts);
  c.root = std::move(root);
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::scatter(std::string name, std::string_view input,
                                  std::string_view output, Expr root, CommOptions opts) {
  Communication c = collective(std::move(name), CommType::Scatter, input, output, opts);
  c.root = std::move(root);
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::alltoall(std::string name, std::string_view input,
                                   std::string_view output, CommOptions opts) {
  return add(collective(std::move(name), CommType::Alltoall, input, output, opts));
}

BodyBuilder& BodyBuilder::send(std::string name, std::string_view tensor, Expr peer,
                               CommOptions opts) {
  return add(pointToPoint(std::move(name), CommType::Send, tensor, std::move(peer), opts));
}

BodyBuilder& BodyBuilder::recv(std::string name, std::string_view tensor, Expr peer,
                               CommOptions opts) {
  return add(pointToPoint(std::move(name), CommType::Recv, tensor, std::move(peer), opts));
}

BodyBuilder& BodyBuilder::shareMemHandles(std::vector<std::string> communications) {
  return add(ShareMemHandles{std::move(communications)});
}

BodyBuilder& BodyBuilder::wait(std::string communication, WaitMode mode) {
  return add(Wait{std::move(communication), mode});
}

BodyBuilder& BodyBuilder::forLoop(std::string index, Expr start, Expr stop,
                                  const std::function<void(BodyBuilder&)>& body, Expr step) {
  ForLoop loop;
  loop.index = std::move(index);
  loop.start = std::move(start);
  loop.stop = std::move(stop);
  loop.step = std::move(step);
  loop.body = buildBody(body);
  return add(std::move(loop));
}

BodyBuilder& BodyBuilder::ifThen(Expr cond, const std::function<void(BodyBuilder&)>& then_body,
                                 const std::function<void(BodyBuilder&)>& else_body) {
  If node;
  node.cond = std::move(cond);
  node.then_body = buildBody(then_body);
  node.else_body = buildBody(else_body);
  return add(std::move(node));
}

BodyBuilder& BodyBuilder::setStream(Expr stream) { return add(SetStream{std::move(stream)}); }

BodyBuilder& BodyBuilder::syncStream(Expr stream) { return add(SyncStream{std::move(stream)}); }

BodyBuilder& BodyBuilder::group(std::string name, const std::function<void(BodyBuilder&)>& body) {
  Group g;
  g.name = std::move(name);
  g.body = buildBody(body);
  return add(std::move(g));
}

BodyBuilder& BodyBuilder::fill(std::string_view tensor, Expr value, Expr step) {
  Fill f;
  f.tensor = ref(tensor);
  f.value = std::move(value);
  f.step = std::move(step);
  return add(std::move(f));
}

BodyBuilder& BodyBuilder::copy(std::string_view src, std::string_view dst) {
  return add(Copy{ref(src), ref(dst)});
}

BodyBuilder& BodyBuilder::check(std::string_view tensor, Expr value, Expr step, double tolerance) {
  Check c;
  c.tensor = ref(tensor);
  c.value = std::move(value);
  c.step = std::move(step);
  c.tolerance = tolerance;
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::matmul(std::string_view a, std::string_view b, std::string_view out,
                                 MatmulOptions opts) {
  return add(Matmul{ref(a), ref(b), ref(out), opts.transpose_a, opts.transpose_b,
                    opts.accumulate});
}

BodyBuilder& BodyBuilder::fillRandom(std::string_view tensor, Expr seed, Real low, Real high) {
  Fill f{ref(tensor), Expr(), Expr(int64_t{0}), RandomFill{std::move(seed), low, high}};
  return add(std::move(f));
}

BodyBuilder& BodyBuilder::checkClose(std::string_view tensor, std::string_view expected,
                                     Real rtol, Real atol) {
  Check c;
  c.tensor = ref(tensor);
  c.expected = ref(expected);
  c.rtol = std::move(rtol);
  c.atol = std::move(atol);
  return add(std::move(c));
}

BodyBuilder& BodyBuilder::relu(std::string_view input, std::string_view output) {
  return add(Relu{ref(input), ref(output), 1.0});
}
BodyBuilder& BodyBuilder::gelu(std::string_view input, std::string_view output) {
  return add(Gelu{ref(input), ref(output), 1.0});
}
BodyBuilder& BodyBuilder::silu(std::string_view input, std::string_view output) {
  return add(Silu{ref(input), ref(output), 1.0});
}
BodyBuilder& BodyBuilder::scale(std::string_view input, std::string_view output, Real factor) {
  return add(Scale{ref(input), ref(output), std::move(factor)});
}
BodyBuilder& BodyBuilder::cast(std::string_view input, std::string_view output) {
  return add(Cast{ref(input), ref(output), 1.0});
}

BodyBuilder& BodyBuilder::addTensors(std::string_view a, std::string_view b,
                                     std::string_view out) {
  return add(Add{ref(a), ref(b), ref(out)});
}

BodyBuilder& BodyBuilder::kernel(std::string name, const std::vector<std::string>& reads,
                                 const std::vector<std::string>& writes,
                                 std::vector<std::pair<std::string, Expr>> args) {
  Kernel k;
  k.name = std::move(name);
  for (const std::string& r : reads) k.reads.push_back(hir::ref(r));
  for (const std::string& w : writes) k.writes.push_back(hir::ref(w));
  std::sort(args.begin(), args.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  k.args = std::move(args);
  return add(std::move(k));
}

ProgramBuilder::ProgramBuilder(std::string name) : ProgramHolder(), BodyBuilder(program_.body) {
  program_.name = std::move(name);
}

ProgramBuilder& ProgramBuilder::param(std::string name, int64_t value) {
  program_.params.push_back({std::move(name), value});
  return *this;
}

ProgramBuilder& ProgramBuilder::worldSize(int64_t world) {
  program_.world_size = world;
  return *this;
}

ProgramBuilder& ProgramBuilder::minWorldSize(int64_t world) {
  program_.min_world_size = world;
  return *this;
}

ProgramBuilder& ProgramBuilder::input(std::string name) {
  program_.inputs.push_back(std::move(name));
  return *this;
}

ProgramBuilder& ProgramBuilder::output(std::string name) {
  program_.outputs.push_back(std::move(name));
  return *this;
}

}  // namespace hir
