#include <hostir/printer.h>

#include <gtest/gtest.h>

#include <sstream>

#include "ir/ir_samples.h"
#include <hostir/json.h>

namespace hir {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The listing line that starts with node path `path` followed by spaces.
std::string lineOf(const std::vector<std::string>& listing, const std::string& path) {
  for (const std::string& l : listing)
    if (l.rfind(path + " ", 0) == 0) return l;
  ADD_FAILURE() << "no line for " << path;
  return "";
}

// Column where the node text starts (after path and indentation).
std::size_t textColumn(const std::string& line) {
  std::size_t path_end = line.find(' ');
  return line.find_first_not_of(' ', path_end);
}

TEST(Printer, RingAllgatherListsEachNodeWithItsPath) {
  auto listing = lines(printProgram(parseProgram(test::kRingAllgatherJson)));
  ASSERT_GE(listing.size(), 3u);
  EXPECT_EQ(listing[0], "program ring_allgather");
  EXPECT_EQ(listing[1], "params n = 1048576");
  EXPECT_EQ(listing[2], "outputs buf");
  std::string alloc = lineOf(listing, "/body/0");
  EXPECT_EQ(alloc.substr(textColumn(alloc)), "allocate buf float32[world, n]");
  std::string loop = lineOf(listing, "/body/2");
  EXPECT_EQ(loop.substr(textColumn(loop)), "for i in [0, world - 1):");
  std::string send = lineOf(listing, "/body/2/body/1");
  EXPECT_EQ(send.substr(textColumn(send)),
            "communication s = send buf[(rank - i + world) % world] to (rank + 1) % world via ipc");
  std::string recv = lineOf(listing, "/body/2/body/2");
  EXPECT_NE(recv.find("recv buf[(rank - i - 1 + world) % world] from (rank - 1 + world) % world"),
            std::string::npos);
  // Nested nodes are indented by two more columns than their parent.
  EXPECT_EQ(textColumn(send), textColumn(loop) + 2);
  EXPECT_EQ(textColumn(alloc), textColumn(loop));
  EXPECT_EQ(lineOf(listing, "/body/3/body/0").substr(textColumn(send)),
            "check buf[j] equals j * 1000, step 1");
}

TEST(Printer, EveryNodeKindPrints) {
  std::string text = printProgram(parseProgram(test::kEveryNodeJson));
  auto listing = lines(text);
  auto textAt = [&](const std::string& path) {
    std::string l = lineOf(listing, path);
    return l.substr(std::min(textColumn(l), l.size()));
  };
  EXPECT_NE(text.find("world_size 4\n"), std::string::npos);
  EXPECT_NE(text.find("params n = 8, chunks = 2\n"), std::string::npos);
  EXPECT_NE(text.find("inputs x\n"), std::string::npos);
  EXPECT_EQ(textAt("/body/2"), "allocate z int64[4, n * chunks]");
  EXPECT_EQ(textAt("/body/3"), "fill x[rank] with rank * 100, step 1");
  EXPECT_EQ(textAt("/body/4"), "set_stream 1");
  EXPECT_EQ(textAt("/body/5"), "group g:");
  EXPECT_EQ(textAt("/body/5/body/0"), "communication ag = allgather x[rank] -> y via nccl");
  EXPECT_EQ(textAt("/body/5/body/1"),
            "communication ar = allreduce sum x -> x team [0, 1, world - 1]");
  EXPECT_EQ(textAt("/body/6"), "wait g on host");
  EXPECT_EQ(textAt("/body/7"), "sync_stream 1");
  EXPECT_EQ(textAt("/body/9"), "communication rs = reduce_scatter max x -> y[rank]");
  EXPECT_EQ(textAt("/body/10"), "communication bc = broadcast x -> x root 0 via mpi");
  EXPECT_EQ(textAt("/body/11"), "communication rd = reduce avg x -> y root world - 1");
  EXPECT_EQ(textAt("/body/12"), "communication ga = gather x[rank] -> y root 1");
  EXPECT_EQ(textAt("/body/13"), "communication sc = scatter y -> x[rank] root 2");
  EXPECT_EQ(textAt("/body/14"), "communication aa = alltoall x -> y");
  EXPECT_EQ(textAt("/body/15"), "wait aa");
  EXPECT_EQ(textAt("/body/16"), "for i in [1, world) step 2:");
  EXPECT_EQ(textAt("/body/16/body/0"), "share_mem_handles s, r");
  EXPECT_EQ(textAt("/body/16/body/1"), "if rank % 2 == 0 && i < world:");
  EXPECT_EQ(textAt("/body/16/body/1/then/0"),
            "communication s = send z[0][0:n] to (rank + i) % world via ipc protocol get");
  EXPECT_EQ(textAt("/body/16/body/1/else/0"),
            "communication r = recv z[1][n:2 * n] from (rank - i + world) % world via ipc "
            "protocol put");
  EXPECT_EQ(textAt("/body/17/then/0"), "copy z[1] -> z[2]");
  EXPECT_EQ(textAt("/body/18"), "check x[rank] equals rank * 100, step 1, tolerance 0.5");
  EXPECT_EQ(textAt("/body/19"), "check z[3][0:2] equals -1");
  EXPECT_EQ(textAt("/body/20"), "deallocate z");
  // The else branch is introduced by its own line, at the if's indentation.
  std::string if_line = lineOf(listing, "/body/16/body/1");
  auto else_line = std::find_if(listing.begin(), listing.end(), [](const std::string& l) {
    return l.find_first_not_of(' ') != std::string::npos && l.substr(l.find_first_not_of(' ')) == "else:";
  });
  ASSERT_NE(else_line, listing.end());
  EXPECT_EQ(else_line->find_first_not_of(' '), textColumn(if_line));
}

TEST(Printer, MissingCommunicationFieldsPrintAsQuestionMarks) {
  Program p;
  p.name = "t";
  Communication c;
  c.name = "c";
  c.type = CommType::Allgather;
  c.output = TensorRef::parse("y", "");
  p.body.push_back(c);
  EXPECT_NE(printProgram(p).find("communication c = allgather ? -> y"), std::string::npos);
}

}  // namespace
}  // namespace hir
