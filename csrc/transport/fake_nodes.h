// Internal: node identity for the bootstraps: this machine's name, and the
// fake node split of HIR_FAKE_NODES=k, which lets one machine pretend to be
// k nodes (tests of multi-node behaviour: ipc to a peer on another node is
// refused, lowering falls back to another backend).
#pragma once

#include <string>

namespace hir {

// This machine's host name (gethostname); throws BackendError when it fails.
std::string hostName();

struct NodeAssignment {
  std::string node;    // "node<i>"
  int local_rank = 0;  // rank among the ranks of that node
  int local_size = 1;  // ranks on that node
};

// `nodes` fake nodes over `world` ranks: rank r is on node r / ceil(world /
// nodes), so the nodes are filled in rank order and only the last may hold
// fewer ranks (with more nodes than ranks, each rank is its own node).
NodeAssignment fakeNodeAssignment(int rank, int world, int nodes);

// The value of HIR_FAKE_NODES: 0 when unset or empty (use the real nodes),
// else k >= 1. Throws UsageError for anything but a positive integer.
int parseFakeNodes(const char* env_value);

}  // namespace hir
