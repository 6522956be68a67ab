// Happens-before and the shadow of allocations (see hazards.h).
#include "analysis/hazards.h"

#include <algorithm>
#include <iterator>

#include "common/check.h"

namespace hir::dry {

// ------------------------------------------------------------- ordering

Ordering::Ordering(int units) : units_(units) {}

void Ordering::join(Clock& into, const Clock& from) {
  for (int t = 0; t < kMaxStreams; ++t) into[t] = std::max(into[t], from[t]);
}

void Ordering::syncStream(int to, int from) {
  if (to != from) join(clock_[to], clock_[from]);
}

int64_t Ordering::post(int unit, int s) {
  Unit& u = units_[unit];
  join(u.snapshot, clock_[s]);
  return ++u.posts;
}

void Ordering::waitStream(int unit, int s) {
  Unit& u = units_[unit];
  if (u.posts == 0) return;
  if (!u.marks) u.marks = std::make_unique<std::array<std::vector<Mark>, kMaxStreams>>();
  std::vector<Mark>& marks = (*u.marks)[s];
  if (marks.empty() || marks.back().covered < u.posts) marks.push_back({u.posts, tick(s)});
  join(clock_[s], u.snapshot);
}

void Ordering::waitHost(int unit) {
  Unit& u = units_[unit];
  u.host_known = u.posts;
  for (Clock& c : clock_) join(c, u.snapshot);
}

std::optional<int64_t> Ordering::knownFrom(const Unit& u, int t, int64_t n) {
  if (!u.marks) return std::nullopt;
  const std::vector<Mark>& marks = (*u.marks)[t];
  // Marks grow in both fields: the first that covers n has the earliest epoch.
  auto it = std::lower_bound(marks.begin(), marks.end(), n,
                             [](const Mark& m, int64_t v) { return m.covered < v; });
  if (it == marks.end()) return std::nullopt;
  return it->epoch;
}

bool Ordering::before(const Accessor& a, int s) const {
  if (!a.isPost()) return clock_[s][a.stream] >= a.epoch;
  const Unit& u = units_[a.unit];
  if (u.host_known >= a.epoch) return true;
  if (!u.marks) return false;
  for (int t = 0; t < kMaxStreams; ++t) {
    std::optional<int64_t> from = knownFrom(u, t, a.epoch);
    if (from && clock_[s][t] >= *from) return true;
  }
  return false;
}

std::vector<int> Ordering::knownOn(int unit, int64_t n) const {
  std::vector<int> out;
  for (int t = 0; t < kMaxStreams; ++t)
    if (knownFrom(units_[unit], t, n)) out.push_back(t);
  return out;
}

// --------------------------------------------------------------- shadow

namespace {

// Whether `prior` is an access the access of `kind` by `who` from stream s
// must be ordered after, and is not.
bool unordered(const Accessor& prior, const Accessor& who, int s, const Ordering& ord) {
  return !prior.same(who) && !ord.before(prior, s);
}

}  // namespace

std::optional<Conflict> Shadow::check(int alloc, int64_t lo, int64_t hi, Access kind,
                                      const Accessor& who, int s, const Ordering& ord) const {
  const Map& m = allocs_[alloc];
  auto it = m.upper_bound(lo);
  if (it != m.begin() && std::prev(it)->second.end > lo) --it;
  for (; it != m.end() && it->first < hi; ++it) {
    const Segment& seg = it->second;
    if (seg.writer && unordered(*seg.writer, who, s, ord)) return Conflict{*seg.writer, true};
    if (kind == Access::Write)
      for (const Accessor& r : seg.readers)
        if (unordered(r, who, s, ord)) return Conflict{r, false};
  }
  return std::nullopt;
}

void Shadow::split(Map& m, int64_t at) {
  auto it = m.upper_bound(at);
  if (it == m.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Segment right = it->second;  // the same accessors on both sides
  it->second.end = at;
  m.emplace_hint(std::next(it), at, std::move(right));
}

void Shadow::record(int alloc, int64_t lo, int64_t hi, Access kind, const Accessor& who, int s,
                    const Ordering& ord) {
  if (lo >= hi) return;
  Map& m = allocs_[alloc];
  split(m, lo);
  split(m, hi);
  auto first = m.lower_bound(lo);
  auto last = m.lower_bound(hi);
  if (kind == Access::Write) {
    // One segment: this writer, no readers since. Gaps become covered.
    m.erase(first, last);
    Segment seg;
    seg.end = hi;
    seg.writer = who;
    m.emplace(lo, std::move(seg));
    return;
  }
  // A read: every part of [lo, hi) gets the reader; gaps become segments.
  int64_t at = lo;
  std::vector<std::pair<int64_t, int64_t>> gaps;
  for (auto it = first; it != last; ++it) {
    if (it->first > at) gaps.push_back({at, it->first});
    Segment& seg = it->second;
    // Readers ordered before this one are implied by it (happens-before is
    // transitive), and so is an earlier read by the same accessor, and an
    // earlier post of the same unit: its posts complete in order, so an
    // access ordered after the later post is ordered after the earlier one
    // (a loop of pending posts that read one buffer keeps one reader, not
    // one per iteration, each scanned by the next).
    std::erase_if(seg.readers, [&](const Accessor& r) {
      return r.same(who) || (who.isPost() && r.unit == who.unit && r.epoch < who.epoch) ||
             ord.before(r, s);
    });
    seg.readers.push_back(who);
    at = seg.end;
  }
  if (at < hi) gaps.push_back({at, hi});
  for (const auto& [b, e] : gaps) {
    Segment seg;
    seg.end = e;
    seg.readers.push_back(who);
    m.emplace(b, std::move(seg));
  }
}

std::optional<Conflict> Shadow::pendingPostWriter(int alloc, int s, const Ordering& ord) const {
  for (const auto& [lo, seg] : allocs_[alloc])
    if (seg.writer && seg.writer->isPost() && !ord.before(*seg.writer, s))
      return Conflict{*seg.writer, true};
  return std::nullopt;
}

}  // namespace hir::dry
