// The first walk of validation (see validate.cc): where each allocation,
// communication and group is declared, and whether its name is unique and
// well formed; and every enum field in range. JSON's parser already
// refuses what these find; a program made by the builder or by hand is
// checked here alike.
#include "analysis/validate_declarations.h"

#include <fmt/format.h>

#include <hostir/expr.h>

#include "common/text.h"

#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hir {

std::string fieldPath(std::string_view node_path, std::string_view field) {
  return fmt::format("{}/{}", node_path, field);
}

namespace {

using Issue = ValidationError::Issue;

// First walk: declarations and their uniqueness.
class Collector {
 public:
  Collector(Declarations& decl, std::vector<Issue>& issues) : decl_(decl), issues_(issues) {}

  // `parent` is a copy: it is often path_, which changes below.
  void walk(const Body& body, const std::string parent, std::string_view field) {
    std::string saved = path_;
    for (std::size_t i = 0; i < body.size(); ++i) {
      path_ = childPath(parent, field, i);
      std::visit(*this, body[i].v);
    }
    path_ = saved;
  }

  void operator()(const Allocate& a) {
    identifier(a.name, "name", "an allocation name");
    known(kDTypeNames, a.dtype, "dtype");
    if (auto it = decl_.allocs.find(a.name); it != decl_.allocs.end()) {
      issue(fieldPath(path_, "name"), fmt::format("allocation name '{}' is already used by the "
                                                  "allocate at {}; allocation names are unique",
                                                  a.name, it->second.path));
      return;
    }
    decl_.allocs[a.name] = {path_, a.dtype, a.shape.size()};
    decl_.alloc_order.push_back(a.name);
  }
  void operator()(const Deallocate&) {}
  void operator()(const Communication& c) {
    identifier(c.name, "name", "a communication name");
    known(kCommTypeNames, c.type, "type");
    if (c.reduce) known(kReduceOpNames, *c.reduce, "reduce");
    known(kProtocolNames, c.protocol, "protocol");
    if (claimPostName(c.name)) decl_.comms[c.name] = {path_, c.backend};
  }
  void operator()(const ShareMemHandles&) {}
  void operator()(const Wait& w) { known(kWaitModeNames, w.mode, "mode"); }
  void operator()(const ForLoop& f) {
    identifier(f.index, "index", "a loop index");
    walk(f.body, path_, "body");
  }
  void operator()(const If& i) {
    walk(i.then_body, path_, "then");
    walk(i.else_body, path_, "else");
  }
  void operator()(const SetStream&) {}
  void operator()(const SyncStream&) {}
  void operator()(const Group& g) {
    identifier(g.name, "name", "a group name");
    if (claimPostName(g.name)) decl_.groups[g.name] = path_;
    walk(g.body, path_, "body");
  }
  void operator()(const Fill&) {}
  void operator()(const Copy&) {}
  void operator()(const Check&) {}
  void operator()(const Matmul&) {}
  void operator()(const Add&) {}
  template <UnaryOp Op>
  void operator()(const Elementwise<Op>&) {}
  void operator()(const Kernel& k) {
    if (auto error = textError("a kernel name", k.name))
      issue(fieldPath(path_, "name"), std::move(*error));
  }

 private:
  void identifier(const std::string& name, std::string_view field, std::string_view what) {
    if (!isIdentifier(name))
      issue(fieldPath(path_, field),
            fmt::format("{} is an identifier ([A-Za-z_][A-Za-z0-9_]*); found {}", what,
                        quotedText(name)));
  }

  template <class E, std::size_t N>
  void known(const std::pair<E, std::string_view> (&table)[N], E value, std::string_view field) {
    if (enumName(table, value) != "?") return;
    decl_.bad_enum = true;
    issue(fieldPath(path_, field), fmt::format("{} {} is not one of {}", field,
                                               static_cast<int>(value), enumChoices(table)));
  }

  // Communications and groups share one namespace: a wait names either.
  bool claimPostName(const std::string& name) {
    std::string previous;
    if (auto it = decl_.comms.find(name); it != decl_.comms.end())
      previous = "the communication at " + it->second.path;
    else if (auto g = decl_.groups.find(name); g != decl_.groups.end())
      previous = "the group at " + g->second;
    if (previous.empty()) return true;
    issue(fieldPath(path_, "name"),
          fmt::format("name '{}' is already used by {}; communication and group names are unique",
                      name, previous));
    return false;
  }

  void issue(std::string path, std::string message) {
    issues_.push_back({std::move(path), std::move(message)});
  }

  Declarations& decl_;
  std::vector<Issue>& issues_;
  std::string path_;
};

}  // namespace

Declarations collectDeclarations(const Body& body, std::vector<ValidationError::Issue>& issues) {
  Declarations decl;
  Collector(decl, issues).walk(body, "", "body");
  return decl;
}

}  // namespace hir
