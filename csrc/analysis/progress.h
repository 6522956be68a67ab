// The deadlock search of the cross-rank check (internal to analysis/).
//
// Every rank's dry run adds to one wait-for graph what its run would block
// on, with the blocking semantics of each construct:
// - a participation node per post: this rank joins the operation once the
//   host reached the post (after its earlier host waits), once the post's
//   stream ran its earlier work (stream waits, sync_streams), and once the
//   backend's order allows (BackendCaps::post_order: mpi and local start a
//   rank's posts one at a time in post order; nccl runs a rank's operations
//   one after another; ipc the messages of a pair); a group's members join
//   together;
// - a meeting node per matched operation (the k-th collective of a team,
//   the k-th message of an ordered pair, the k-th share_mem_handles), added
//   after the ranks' sequences were matched: it completes once every
//   participant joined;
// - host-wait, stream-wait and sync nodes, which need the meeting (or the
//   stream) they wait for.
// Each node completes when all its predecessors did, so the run can block
// forever exactly when the graph has a cycle. Kahn's algorithm finds one in
// time and memory linear in the nodes and edges, a few per operation
// simulated; the cycle is reported as the chain of waits it is made of.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "analysis/site.h"
#include "plan/plan.h"

namespace hir::dry {

// A node's completion as a source of edges: the node itself, or the
// meeting its participation joins (known only after matching).
struct Done {
  int id = -1;           // -1: nothing to wait for
  bool meeting = false;  // id is a participation: the meeting it joins
};

class WaitGraph {
 public:
  enum class Kind : uint8_t { Part, GroupStart, GroupDone, HostWait, StreamWait, Sync, Meeting };
  struct Node {
    Kind kind;
    int rank = -1;
    int pc = -1;         // the instruction (Part, waits, sync, group nodes)
    int stream = 0;      // StreamWait, Sync: the stream; Part: the post's stream
    int64_t loops = -1;  // offset of its loop values in loop_values_, or -1
  };
  // What a meeting is, for messages.
  struct Meeting {
    enum class What : uint8_t { Collective, Message, Share } what;
    int team = -1;            // collectives
    int from = -1, to = -1;   // messages
    int64_t index = 0;        // among the team's collectives, the pair's messages, the shares
    int part = -1;            // a participation (the send, for messages)
  };

  int add(Kind kind, int rank, int pc, int stream, const Site& site);
  void edge(int from, int to) {
    if (from >= 0) edges_.push_back({from, to});
  }
  void edge(Done from, int to) {
    if (from.id < 0) return;
    (from.meeting ? completions_ : edges_).push_back({from.id, to});
  }
  // An edge of a backend's order of starts (kStartsInPostOrder): `to`
  // starts only after `from` started.
  void startOrder(int from, int to);
  // A matched operation of the participations `parts`.
  void meet(Meeting m, const std::vector<int>& parts);

  // A cycle, as a sentence per wait, or nothing. Call after every meet().
  std::optional<std::pair<std::string, std::string>> findCycle(const Plan& plan) const;  // path, message

  const Node& node(int id) const { return nodes_[id]; }
  std::size_t size() const { return nodes_.size(); }

 private:
  std::string siteOf(const Plan& plan, int id) const;
  std::string describeMeeting(const Plan& plan, int meeting) const;
  std::string describeNode(const Plan& plan, int id) const;
  // Whether b's start follows a's by the backend's order of starts.
  bool startsAfter(int b, int a) const;
  // The name of the backend a post or a group runs on ("the backend" else).
  std::string backendOf(const Plan& plan, int id) const;

  std::vector<Node> nodes_;
  std::vector<int64_t> loop_values_;
  std::vector<std::pair<int, int>> edges_;        // from -> to
  std::vector<std::pair<int, int>> completions_;  // participation -> to: its meeting -> to
  std::vector<int> meeting_of_;                   // per node: the meeting of a participation
  std::vector<int> start_pred_;                   // per node: the start it follows, or -1
  std::vector<int> meeting_info_;                 // per node: index into meetings_
  std::vector<Meeting> meetings_;
};

// One rank's side: where its host and streams stand, and the last post per
// unit, backend and lane, as the rank steps through the plan.
class RankGraph {
 public:
  RankGraph(WaitGraph& g, const Plan& plan, int rank);

  // A post of `comm` from stream s (outside a group: `unit` is its own;
  // in a group: between groupBegin and groupEnd). Returns the participation.
  int post(int comm, int unit, int s, int pc, const Site& site, int peer);
  void groupBegin(int group, int s, int pc, const Site& site);
  void groupEnd(int group, int unit, int pc, const Site& site);
  void waitStream(int unit, int s, int pc, const Site& site);
  void waitHost(int unit, int pc, const Site& site);
  void sync(int to, int from, int pc, const Site& site);
  // share_mem_handles: a collective of the world that blocks the host.
  int share(int pc, const Site& site);

 private:
  // Calls f(Done&) for each backend order a post joins after: kPerRank, the
  // backend's last post; kPerPeer, the pair's last message (for a
  // collective run as messages, every lane with the other team members).
  template <class F>
  void forEachOrderSlot(int comm, int peer, F&& f);
  // kStartsInPostOrder: `node` (a post or a group's start) joins only after
  // the rank's previous post on `backend` joined.
  void startAfterEarlierPosts(int backend, int node);

  WaitGraph& g_;
  const Plan& plan_;
  const int rank_;
  int host_ = -1;
  std::array<int, kMaxStreams> stream_;
  std::vector<Done> unit_done_;            // per unit: its latest post's completion
  std::vector<Done> backend_tail_;         // per backend: kPerRank order
  std::vector<int> start_tail_;            // per backend: kStartsInPostOrder, the last start
  std::map<std::pair<int, int>, Done> lane_tail_;  // (backend, peer * 2 + direction): kPerPeer
  int group_start_ = -1, group_ = -1;
  std::vector<int> group_parts_;
};

}  // namespace hir::dry
