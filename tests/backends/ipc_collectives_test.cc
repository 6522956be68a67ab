// The messages ipc runs a collective as (backends/ipc/collectives.h), for
// every type, team size, count, root and placement: both ends of a pair list
// its messages alike, and what a member receives plus its own chunk covers
// its output exactly once.
#include "backends/ipc/collectives.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "common/check.h"

namespace hir {
namespace {

using ::testing::HasSubstr;

constexpr CommType kTypes[] = {CommType::Allgather, CommType::Broadcast, CommType::Alltoall,
                               CommType::Allreduce, CommType::ReduceScatter};

// One member's list of every member of a team.
std::vector<std::vector<CollectiveMessage>> lists(CollectiveShape s, std::string_view* algorithm) {
  std::vector<std::vector<CollectiveMessage>> out(static_cast<std::size_t>(s.team_size));
  for (int me = 0; me < s.team_size; ++me) {
    s.me = me;
    std::string_view a =
        ipcCollectiveMessages(s, Settings::fromEnvironment(), out[static_cast<std::size_t>(me)]);
    if (me == 0) *algorithm = a;
    EXPECT_EQ(a, *algorithm) << "member " << me << " picked another algorithm";
  }
  return out;
}

bool operator==(const CollectiveMessage& a, const CollectiveMessage& b) {
  return std::tie(a.from, a.to, a.from_output, a.from_offset, a.to_offset, a.count, a.protocol) ==
         std::tie(b.from, b.to, b.from_output, b.from_offset, b.to_offset, b.count, b.protocol);
}

// Every shape the backend runs: team sizes 1..9, counts around the chunk
// boundaries, every root, in and out of place (alltoall: out only); with
// eager on (its limit 64 bytes: 16 floats, so that the larger counts are
// put and get) and off; and broadcast by copies (its default at these
// sizes) and by scatter-allgather (HIR_IPC_BROADCAST_SPLIT_MIN=0).
template <class F>
void forEveryShape(F&& f) {
  for (const char* split_min : {"", "0"}) {
    ::setenv("HIR_IPC_BROADCAST_SPLIT_MIN", split_min, 1);  // "": the default
    for (const char* eager_max : {"64", "0"}) {
      ::setenv("HIR_IPC_EAGER_MAX", eager_max, 1);
      for (CommType type : kTypes)
        for (int n = 1; n <= 9; ++n)
          for (std::size_t count : {0, 1, 5, 7, 16, 17, 1000})
            for (bool in_place : {false, true})
              for (int root = 0; root < (type == CommType::Broadcast ? n : 1); ++root) {
                if (type == CommType::Alltoall && in_place && n > 1) continue;
                if (*split_min != '\0' && type != CommType::Broadcast) continue;
                f(CollectiveShape{type, DType::Float32, count, n, 0, root, in_place});
              }
    }
  }
  ::unsetenv("HIR_IPC_EAGER_MAX");
  ::unsetenv("HIR_IPC_BROADCAST_SPLIT_MIN");
}

TEST(IpcCollectives, EveryMemberListsEachPairsMessagesAlike) {
  forEveryShape([](const CollectiveShape& s) {
    std::string_view algorithm;
    const auto all = lists(s, &algorithm);
    const int n = s.team_size;
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        std::vector<CollectiveMessage> at_a, at_b;
        for (const CollectiveMessage& m : all[static_cast<std::size_t>(a)]) {
          ASSERT_NE(m.from, m.to);
          ASSERT_TRUE(m.from == a || m.to == a) << "member " << a << " lists a message of others";
          if (m.from == a && m.to == b) at_a.push_back(m);
        }
        for (const CollectiveMessage& m : all[static_cast<std::size_t>(b)])
          if (m.from == a && m.to == b) at_b.push_back(m);
        ASSERT_EQ(at_a.size(), at_b.size())
            << toString(s.type) << " team " << n << " count " << s.count << ": " << a << "->" << b;
        for (std::size_t k = 0; k < at_a.size(); ++k)
          EXPECT_TRUE(at_a[k] == at_b[k]) << toString(s.type) << " team " << n << " message #" << k
                                          << " " << a << "->" << b << " differs between its ends";
      }
  });
}

// What lands in a member's output: the put (or eager) messages it
// receives, the get messages outside a reduction (a broadcast's
// scatter), its own chunk (copied locally, or reduced), and, for a
// reduction, the chunk it reduces from get (or eager) messages. Each
// element exactly once.
TEST(IpcCollectives, WhatAMemberReceivesAndItsOwnChunkCoverItsOutputOnce) {
  forEveryShape([](const CollectiveShape& s) {
    std::string_view algorithm;
    const auto all = lists(s, &algorithm);
    const int n = s.team_size;
    const std::size_t c = s.count;
    const std::size_t out_count = s.type == CommType::Allgather || s.type == CommType::Alltoall
                                      ? c * static_cast<std::size_t>(n)
                                      : c;
    for (int me = 0; me < n; ++me) {
      std::vector<int> covered(out_count, 0);
      auto cover = [&](std::size_t begin, std::size_t count) {
        ASSERT_LE(begin + count, out_count);
        for (std::size_t i = begin; i < begin + count; ++i) ++covered[i];
      };
      std::size_t reduced_begin = 0, reduced_count = c;  // the member's own reduction
      bool reduces = s.type == CommType::Allreduce || s.type == CommType::ReduceScatter;
      for (const CollectiveMessage& m : all[static_cast<std::size_t>(me)]) {
        if (m.to != me) continue;
        const bool source =
            reduces && (m.protocol == Protocol::Get || m.protocol == Protocol::Eager);
        if (!source) cover(m.to_offset, m.count);
        if (source) {
          reduced_begin = m.to_offset;
          reduced_count = m.count;
        }
      }
      switch (s.type) {
        case CommType::Allgather:
        case CommType::Alltoall: cover(static_cast<std::size_t>(me) * c, c); break;
        case CommType::Broadcast:
          if (me == s.root) cover(0, c);
          break;
        default: cover(reduced_begin, reduced_count); break;
      }
      for (std::size_t i = 0; i < out_count; ++i)
        ASSERT_EQ(covered[i], 1) << toString(s.type) << " (" << algorithm << ") team " << n
                                 << " count " << c << (s.in_place ? " in place" : "")
                                 << ": member " << me << "'s output element " << i;
    }
  });
}

TEST(IpcCollectives, AllreduceIsOneShotUpToTheLimitAndTwoShotAboveItOrInPlace) {
  ::setenv("HIR_IPC_EAGER_MAX", "0", 1);  // eager would take the small ones first
  ::setenv("HIR_IPC_ONE_SHOT_MAX", "4096", 1);
  std::vector<CollectiveMessage> out;
  CollectiveShape s{CommType::Allreduce, DType::Float32, 1024, 4, 1, 0, false};
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "one-shot");
  EXPECT_EQ(out.size(), 6u);  // a get from and to each of 3 peers
  s.count = 1025;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot");
  EXPECT_EQ(out.size(), 12u);  // and a put from and to each
  s.count = 16;
  s.in_place = true;  // the peers would read what this member overwrites
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot");
  s.type = CommType::ReduceScatter;  // each member writes only its own chunk
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "one-shot");
  ::unsetenv("HIR_IPC_ONE_SHOT_MAX");
  s.type = CommType::Allreduce;
  s.in_place = false;
  s.count = (256 << 10) / 4;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "one-shot")
      << "the default limit is 256 KiB";
  s.count += 1;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot");
  ::unsetenv("HIR_IPC_EAGER_MAX");
}

// A pair reads as many bytes by one-shot as by two-shot and saves a phase:
// its default limit is 16 MiB, a larger team's 256 KiB; HIR_IPC_ONE_SHOT_MAX
// sets both, and in place is two-shot whatever the size.
TEST(IpcCollectives, AnAllreduceOfTwoIsOneShotUpTo16MiB) {
  ::setenv("HIR_IPC_EAGER_MAX", "0", 1);
  std::vector<CollectiveMessage> out;
  CollectiveShape s{CommType::Allreduce, DType::Float32, (16 << 20) / 4, 2, 1, 0, false};
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "one-shot");
  EXPECT_EQ(out.size(), 2u);  // a get from and to the peer
  s.count += 1;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot");
  s.count = (1 << 20) / 4;
  s.team_size = 3;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot")
      << "a team of 3 stops at 256 KiB";
  s.team_size = 2;
  s.in_place = true;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot");
  s.in_place = false;
  ::setenv("HIR_IPC_ONE_SHOT_MAX", "4096", 1);
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot");
  ::unsetenv("HIR_IPC_ONE_SHOT_MAX");
  ::unsetenv("HIR_IPC_EAGER_MAX");
}

// A broadcast of 3 members or more from 4 MiB: each other member gets its
// chunk of T - 1 from the root, then puts it into the others' outputs from
// its own. The root's links carry N bytes where copies from it carried
// (T - 1) N. A pair, and chunks that go eager, stay copies.
TEST(IpcCollectives, ABroadcastOfThreeOrMoreFrom4MiBIsScatterAllgather) {
  std::vector<CollectiveMessage> out;
  const std::size_t c = (4 << 20) / 4;  // float32
  CollectiveShape s{CommType::Broadcast, DType::Float32, c, 4, 1, 1, false};  // member 1, root 1
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "scatter-allgather")
      << "the root";
  std::size_t sent = 0;
  for (const CollectiveMessage& m : out) {
    EXPECT_EQ(m.from, 1);
    EXPECT_EQ(m.protocol, Protocol::Get);
    EXPECT_FALSE(m.from_output);
    sent += m.count;
  }
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(sent, c) << "the root's links carry the buffer once";
  s.me = 2;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "scatter-allgather")
      << "a member";
  ASSERT_EQ(out.size(), 5u);  // its chunk from the root, then to and from each of 2 members
  EXPECT_EQ(out[0].from, 1);
  EXPECT_EQ(out[0].protocol, Protocol::Get);
  for (std::size_t k = 1; k < out.size(); ++k) {
    EXPECT_EQ(out[k].protocol, Protocol::Put) << k;
    EXPECT_TRUE(out[k].from_output) << "a member forwards what it got: " << k;
    EXPECT_NE(out[k].from, 1) << k;
    EXPECT_NE(out[k].to, 1) << k;
  }
  s.count = c - 1;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "copies") << "below 4 MiB";
  s.count = 8 * c;
  s.me = 0;
  s.team_size = 2;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "copies") << "a pair";
  s.team_size = 3;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "scatter-allgather")
      << "3 members";
  ::setenv("HIR_IPC_BROADCAST_SPLIT_MIN", "0", 1);
  s.count = 4096;  // 16 KiB: eager
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "eager copies");
  s.count = 4097;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "scatter-allgather");
  ::setenv("HIR_IPC_BROADCAST_SPLIT_MIN", "-1", 1);
  EXPECT_THROW(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), UsageError);
  ::unsetenv("HIR_IPC_BROADCAST_SPLIT_MIN");
}

// Up to the eager limit (16 KiB by default), per message: a chunk that fits
// goes eager, in place too for a reduction (the peers read their slots),
// and every message of the collective alike.
TEST(IpcCollectives, ChunksUpToTheEagerLimitGoEagerInPlaceToo) {
  std::vector<CollectiveMessage> out;
  auto protocols = [&] {
    std::set<Protocol> p;
    for (const CollectiveMessage& m : out) p.insert(m.protocol);
    return p;
  };
  const std::set<Protocol> eager{Protocol::Eager};
  CollectiveShape s{CommType::Allreduce, DType::Float32, 4096, 4, 1, 0, false};
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "eager one-shot");
  EXPECT_EQ(out.size(), 6u);  // from and to each of 3 peers, as get's one-shot
  EXPECT_EQ(protocols(), eager);
  s.in_place = true;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "eager one-shot");
  s.count = 4097;  // 16 KiB + 4: two-shot in place, one-shot by get out of place
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "two-shot");
  s.in_place = false;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "one-shot");
  s.type = CommType::ReduceScatter;  // chunk c of each input
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "one-shot");
  s.count = 4096;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "eager one-shot");
  for (CommType t : {CommType::Allgather, CommType::Broadcast, CommType::Alltoall}) {
    s.type = t;
    s.count = 4096;
    EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "eager copies")
        << toString(t);
    EXPECT_EQ(protocols(), eager) << toString(t);
    s.count = 4097;
    EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "copies") << toString(t);
    EXPECT_EQ(protocols(), std::set<Protocol>{Protocol::Put}) << toString(t);
  }
  ::setenv("HIR_IPC_EAGER_MAX", "0", 1);  // off
  s.count = 1;
  EXPECT_EQ(ipcCollectiveMessages(s, Settings::fromEnvironment(), out), "copies");
  ::unsetenv("HIR_IPC_EAGER_MAX");
}

TEST(IpcCollectives, AlltoallInPlaceIsRefusedSayingWhy) {
  std::vector<CollectiveMessage> out;
  try {
    ipcCollectiveMessages({CommType::Alltoall, DType::Int32, 4, 2, 0, 0, true},
                          Settings::fromEnvironment(), out);
    FAIL() << "an in-place alltoall was accepted";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot run in place: give it an output apart from its input"));
  }
}

TEST(IpcCollectives, ATeamLargerThanANodeIsRefusedSoTheCheckStaysSmall) {
  std::vector<CollectiveMessage> out;
  EXPECT_EQ(ipcCollectiveMessages({CommType::Allgather, DType::Int32, 4, 64, 0, 0, false},
                                  Settings::fromEnvironment(), out),
            "eager copies");
  EXPECT_EQ(out.size(), 126u);
  try {
    ipcCollectiveMessages({CommType::Allgather, DType::Int32, 4, 65, 0, 0, false},
                          Settings::fromEnvironment(), out);
    FAIL() << "an allgather of 65 members was accepted";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("at most 64 ranks (the ranks of one node)"));
    EXPECT_THAT(e.what(), HasSubstr("allgather has a team of 65"));
  }
}

TEST(IpcCollectives, AReductionOverMoreRanksThanOneKernelReadsIsRefused) {
  std::vector<CollectiveMessage> out;
  try {
    ipcCollectiveMessages({CommType::Allreduce, DType::Int32, 4, 17, 0, 0, false},
                          Settings::fromEnvironment(), out);
    FAIL() << "a reduction of 17 members was accepted";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("at most 16 ranks"));
    EXPECT_THAT(e.what(), HasSubstr("team of 17"));
  }
}

}  // namespace
}  // namespace hir
