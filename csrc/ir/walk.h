// Walks a body in program order, into every nested body. The visit lists
// every node kind, so a new kind that holds a body fails to compile here
// until it says where its body is; passes that collect from nested nodes
// use this instead of their own recursion.
#pragma once

#include <variant>

#include <hostir/program.h>

#include "common/overloaded.h"

namespace hir {

// Calls f(node) for `n`, then for every node nested in it.
template <class F>
void walkNodes(const Node& n, F&& f) {
  f(n);
  auto all = [&](const Body& body) {
    for (const Node& child : body) walkNodes(child, f);
  };
  std::visit(Overloaded{
                 [](const Allocate&) {},
                 [](const Deallocate&) {},
                 [](const Communication&) {},
                 [](const ShareMemHandles&) {},
                 [](const Wait&) {},
                 [&](const ForLoop& l) { all(l.body); },
                 [&](const If& i) {
                   all(i.then_body);
                   all(i.else_body);
                 },
                 [](const SetStream&) {},
                 [](const SyncStream&) {},
                 [&](const Group& g) { all(g.body); },
                 [](const Fill&) {},
                 [](const Copy&) {},
                 [](const Check&) {},
                 [](const Matmul&) {},
                 [](const Add&) {},
                 []<UnaryOp Op>(const Elementwise<Op>&) {},
                 [](const Kernel&) {},
             },
             n.v);
}

template <class F>
void walkNodes(const Body& body, F&& f) {
  for (const Node& n : body) walkNodes(n, f);
}

}  // namespace hir
