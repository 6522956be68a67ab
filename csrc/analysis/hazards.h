// The hazard rules of the dry run, for one rank (internal to analysis/).
//
// Ordering: a happens-before relation over the rank's 16 streams, its posts,
// waits and sync_streams, kept as vector clocks. Every operation on a stream
// has an epoch on it; clock[s][t] says how far stream s is ordered after
// stream t's operations. A post of a completion unit (a communication outside
// groups, or a group: what a wait completes) is live from the post until it
// is known complete: a stream-mode wait on stream s makes it known on s from
// that wait's epoch on, and so on every stream ordered after that point
// (sync_stream, or a later wait whose post came after it); a host-mode wait
// makes it known everywhere. A wait covers the earlier posts of its unit too
// (docs/ir.md: "a wait refers to the latest post"; the run's posts of one
// unit complete in order), so what a stream knows of a unit is a prefix of
// its posts.
//
// Shadow: per allocation, an interval map of element ranges to the last
// writer and the readers since, so a new access is compared only with the
// accesses that overlap it (no scan of every pending post). Readers that the
// new reader is ordered after are dropped: what is ordered after the new one
// is ordered after them too. Time per access: a logarithm plus the segments
// it overlaps; memory: the live segments.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "analysis/site.h"
#include "plan/plan.h"

namespace hir::dry {

// Who touched memory: an operation on a stream, or a post of a unit.
struct Accessor {
  int unit = -1;      // -1: an operation on `stream`
  int stream = 0;     // the stream it ran on, or the post was made from
  int64_t epoch = 0;  // an operation: its epoch on `stream`; a post: its number in the unit (from 1)
  int pc = -1;        // the instruction (for messages)
  Site site;

  bool isPost() const { return unit >= 0; }
  // The same instruction execution (a post's input and output may overlap:
  // in place). Two communications of one group post are not the same.
  bool same(const Accessor& o) const {
    return unit == o.unit && stream == o.stream && epoch == o.epoch && pc == o.pc;
  }
};

class Ordering {
 public:
  explicit Ordering(int units);

  // An operation on stream s: its epoch.
  int64_t tick(int s) { return ++clock_[s][s]; }
  // Stream `to` waits for everything enqueued on `from` so far.
  void syncStream(int to, int from);
  // A post of `unit` from stream s: its number in the unit.
  int64_t post(int unit, int s);
  int64_t posts(int unit) const { return units_[unit].posts; }
  // Waits for the latest post of `unit` (and so for the earlier ones).
  void waitStream(int unit, int s);
  void waitHost(int unit);

  // Whether `a` is ordered before what stream s does from now on.
  bool before(const Accessor& a, int s) const;
  // The streams whose waits made post n of `unit` known (for messages).
  std::vector<int> knownOn(int unit, int64_t n) const;

 private:
  using Clock = std::array<int64_t, kMaxStreams>;
  struct Mark {
    int64_t covered;  // posts 1..covered are known ...
    int64_t epoch;    // ... from this epoch of the stream on
  };
  struct Unit {
    int64_t posts = 0;
    int64_t host_known = 0;  // posts 1..host_known were waited in host mode
    Clock snapshot{};        // join of the posting streams' clocks, over all posts
    std::unique_ptr<std::array<std::vector<Mark>, kMaxStreams>> marks;  // per stream, once waited
  };
  static void join(Clock& into, const Clock& from);
  // The epoch from which stream t knows post n of u, or nullopt.
  static std::optional<int64_t> knownFrom(const Unit& u, int t, int64_t n);

  std::array<Clock, kMaxStreams> clock_{};
  std::vector<Unit> units_;
};

// What an access conflicts with: an earlier accessor not ordered before it.
struct Conflict {
  Accessor prior;
  bool prior_writes = false;
};

class Shadow {
 public:
  explicit Shadow(int allocs) : allocs_(allocs) {}

  // The first recorded access of [lo, hi) in `alloc` that conflicts with
  // an access of `kind` by `who` from stream s (write-write, read-write,
  // write-read) and is not ordered before it.
  std::optional<Conflict> check(int alloc, int64_t lo, int64_t hi, Access kind,
                                const Accessor& who, int s, const Ordering& ord) const;
  // Records the access (after check()).
  void record(int alloc, int64_t lo, int64_t hi, Access kind, const Accessor& who, int s,
              const Ordering& ord);
  // A post writing `alloc` not known complete on stream s (deallocation).
  std::optional<Conflict> pendingPostWriter(int alloc, int s, const Ordering& ord) const;
  void clear(int alloc) { allocs_[alloc].clear(); }

 private:
  struct Segment {
    int64_t end = 0;
    std::optional<Accessor> writer;
    std::vector<Accessor> readers;
  };
  using Map = std::map<int64_t, Segment>;  // by first element; segments do not overlap
  // Splits so that a segment starts at `at` if one covers it.
  static void split(Map& m, int64_t at);
  std::vector<Map> allocs_;
};

}  // namespace hir::dry
