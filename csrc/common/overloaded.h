// Overloaded{lambda...}: a visitor built from lambdas, for std::visit over
// the node and instruction variants. Give one lambda per alternative (no
// generic `auto` catch-all), so a new alternative breaks the build.
#pragma once

namespace hir {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace hir
