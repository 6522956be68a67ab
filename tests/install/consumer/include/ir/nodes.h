// The consumer's own ir/nodes.h, found before anything else on its include
// path. hostir's public headers include each other as <hostir/...>, so they
// never pick this file up; main.cc uses it alongside hostir.
#pragma once

namespace consumer {
struct Node {
  int id = 42;
};
}  // namespace consumer
