#include <hostir/printer.h>

#include <fmt/format.h>

#include <algorithm>

namespace hir {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += fmt::format("{}{}", out.empty() ? "" : ", ", s);
  return out;
}

std::string joinExprs(const std::vector<Expr>& exprs) {
  std::vector<std::string> texts;
  for (const Expr& e : exprs) texts.push_back(e.str());
  return join(texts);
}

// A reference the loader left out (the validator reports it) prints as "?".
std::string refText(const std::optional<TensorRef>& ref) { return ref ? ref->str() : "?"; }

std::string realText(const Real& r) {
  return r.isExpr() ? r.expr.str() : fmt::format("{}", r.number);
}

std::string patternText(const Expr& value, const Expr& step) {
  return step == Expr(int64_t{0}) ? value.str() : fmt::format("{}, step {}", value.str(), step.str());
}

// One listing row: the node path (empty for "else:"), the nesting depth and
// the text.
struct Row {
  std::string path;
  int depth;
  std::string text;
};

// Collects the rows of a body. One operator() per node type, no catch-all,
// so a new node kind must say how it prints.
class Lister {
 public:
  explicit Lister(std::vector<Row>& rows) : rows_(rows) {}

  void body(const Body& nodes, const std::string& parent, std::string_view field, int depth) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      path_ = childPath(parent, field, i);
      depth_ = depth;
      std::visit(*this, nodes[i].v);
    }
  }

  void operator()(const Allocate& n) {
    row(fmt::format("allocate {} {}[{}]", n.name, toString(n.dtype), joinExprs(n.shape)));
  }
  void operator()(const Deallocate& n) { row(fmt::format("deallocate {}", n.name)); }
  void operator()(const Communication& n) { row(communicationText(n)); }
  void operator()(const ShareMemHandles& n) {
    row(fmt::format("share_mem_handles {}", join(n.communications)));
  }
  void operator()(const Wait& n) {
    row(fmt::format("wait {}{}", n.communication, n.mode == WaitMode::Host ? " on host" : ""));
  }
  void operator()(const ForLoop& n) {
    std::string step = n.step == Expr(int64_t{1}) ? "" : fmt::format(" step {}", n.step.str());
    nested(fmt::format("for {} in [{}, {}){}:", n.index, n.start.str(), n.stop.str(), step),
           n.body, "body");
  }
  void operator()(const If& n) {
    const std::string path = path_;
    const int depth = depth_;
    nested(fmt::format("if {}:", n.cond.str()), n.then_body, "then");
    if (n.else_body.empty()) return;
    rows_.push_back({"", depth, "else:"});
    body(n.else_body, path, "else", depth + 1);
  }
  void operator()(const SetStream& n) { row(fmt::format("set_stream {}", n.stream.str())); }
  void operator()(const SyncStream& n) { row(fmt::format("sync_stream {}", n.stream.str())); }
  void operator()(const Group& n) { nested(fmt::format("group {}:", n.name), n.body, "body"); }
  void operator()(const Fill& n) {
    if (n.random)
      row(fmt::format("fill {} with random values in [{}, {}) of seed {}", n.tensor.str(),
                      realText(n.random->low), realText(n.random->high), n.random->seed.str()));
    else
      row(fmt::format("fill {} with {}", n.tensor.str(), patternText(n.value, n.step)));
  }
  void operator()(const Copy& n) { row(fmt::format("copy {} -> {}", n.src.str(), n.dst.str())); }
  void operator()(const Check& n) {
    std::string tolerance = n.tolerance == 0 ? "" : fmt::format(", tolerance {}", n.tolerance);
    if (n.atol.isExpr() || n.atol.number != 0) tolerance += ", atol " + realText(n.atol);
    if (n.rtol.isExpr() || n.rtol.number != 0) tolerance += ", rtol " + realText(n.rtol);
    row(fmt::format("check {} equals {}{}", n.tensor.str(),
                    n.expected ? n.expected->str() : patternText(n.value, n.step), tolerance));
  }

  void operator()(const Matmul& n) {
    auto op = [](const TensorRef& r, bool t) { return t ? r.str() + "^T" : r.str(); };
    row(fmt::format("matmul {} {}= {} * {}", n.out.str(), n.accumulate ? "+" : "",
                    op(n.a, n.transpose_a), op(n.b, n.transpose_b)));
  }
  void operator()(const Add& n) {
    row(fmt::format("add {} = {} + {}", n.out.str(), n.a.str(), n.b.str()));
  }
  template <UnaryOp Op>
  void operator()(const Elementwise<Op>& n) {
    if constexpr (Op == UnaryOp::Scale)
      row(fmt::format("scale {} = {} * {}", n.output.str(), n.input.str(), realText(n.factor)));
    else
      row(fmt::format("{} {} = {}({})", toString(Op), n.output.str(), toString(Op), n.input.str()));
  }
  void operator()(const Kernel& n) {
    std::vector<std::string> reads, writes, args;
    for (const TensorRef& r : n.reads) reads.push_back(r.str());
    for (const TensorRef& r : n.writes) writes.push_back(r.str());
    for (const auto& [name, e] : n.args) args.push_back(fmt::format("{} = {}", name, e.str()));
    row(fmt::format("kernel {} reads [{}] writes [{}]{}", n.name, join(reads), join(writes),
                    args.empty() ? "" : fmt::format(" args {}", join(args))));
  }

 private:
  void row(std::string text) { rows_.push_back({path_, depth_, std::move(text)}); }

  void nested(std::string header, const Body& children, std::string_view field) {
    const std::string path = path_;
    const int depth = depth_;
    row(std::move(header));
    body(children, path, field, depth + 1);
  }

  // "s = send buf[0] to 1 via ipc", "ar = allreduce sum x -> y team [0, 1]":
  // the fields that are present, in a fixed order.
  static std::string communicationText(const Communication& n) {
    std::string out = fmt::format("communication {} = {}", n.name, toString(n.type));
    if (n.reduce) out += fmt::format(" {}", toString(*n.reduce));
    if (n.input || n.output) out += fmt::format(" {} -> {}", refText(n.input), refText(n.output));
    if (n.tensor) out += fmt::format(" {}", n.tensor->str());
    if (n.peer) {
      std::string_view word =
          n.type == CommType::Send ? "to" : n.type == CommType::Recv ? "from" : "peer";
      out += fmt::format(" {} {}", word, n.peer->str());
    }
    if (n.root) out += fmt::format(" root {}", n.root->str());
    if (!n.team.all) out += fmt::format(" team [{}]", joinExprs(n.team.ranks));
    if (n.backend != "auto") out += fmt::format(" via {}", n.backend);
    if (n.protocol != Protocol::Auto) out += fmt::format(" protocol {}", toString(n.protocol));
    return out;
  }

  std::vector<Row>& rows_;
  std::string path_;
  int depth_ = 0;
};

std::string header(const Program& p) {
  std::string out = fmt::format("program {}\n", p.name);
  if (p.world_size) out += fmt::format("world_size {}\n", *p.world_size);
  if (p.min_world_size) out += fmt::format("min_world_size {}\n", *p.min_world_size);
  if (!p.params.empty()) {
    std::vector<std::string> params;
    for (const Param& param : p.params) params.push_back(fmt::format("{} = {}", param.name, param.value));
    out += fmt::format("params {}\n", join(params));
  }
  if (!p.inputs.empty()) out += fmt::format("inputs {}\n", join(p.inputs));
  if (!p.outputs.empty()) out += fmt::format("outputs {}\n", join(p.outputs));
  return out;
}

}  // namespace

std::string printProgram(const Program& program) {
  std::vector<Row> rows;
  Lister(rows).body(program.body, "", "body", 0);
  std::size_t width = 0;
  for (const Row& r : rows) width = std::max(width, r.path.size());
  std::string out = header(program);
  for (const Row& r : rows)
    out += fmt::format("{:<{}}{:{}}{}\n", r.path, width + 2, "", 2 * r.depth, r.text);
  return out;
}

}  // namespace hir
