#include <hostir/json.h>
#include "support/test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/check.h"
#include "ir/ir_samples.h"

namespace hir {
namespace {

// A program whose body is `body` (JSON text of the array's elements).
std::string withBody(std::string_view body) {
  return std::string(R"({"format": "hostir/1", "name": "t", "body": [)") + std::string(body) + "]}";
}

ParseError parseError(std::string_view text) {
  try {
    parseProgram(text, "test.json");
  } catch (const ParseError& e) {
    return e;
  }
  ADD_FAILURE() << "parsed: " << text;
  return ParseError("", "");
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != s.npos; }

template <class T>
const T& nodeAs(const Body& body, std::size_t i) {
  return std::get<T>(body.at(i).v);
}

TEST(Json, RingAllgatherLoads) {
  Program p = parseProgram(test::kRingAllgatherJson);
  EXPECT_EQ(p.name, "ring_allgather");
  EXPECT_FALSE(p.world_size.has_value());
  EXPECT_EQ(p.params, (std::vector<Param>{{"n", 1048576}}));
  EXPECT_TRUE(p.inputs.empty());
  EXPECT_EQ(p.outputs, std::vector<std::string>{"buf"});
  ASSERT_EQ(p.body.size(), 4u);
  const auto& alloc = nodeAs<Allocate>(p.body, 0);
  EXPECT_EQ(alloc.dtype, DType::Float32);
  EXPECT_EQ(alloc.shape, (std::vector<Expr>{Expr("world"), Expr("n")}));
  const auto& fill = nodeAs<Fill>(p.body, 1);
  EXPECT_EQ(fill.tensor.str(), "buf[rank]");
  EXPECT_EQ(fill.step, Expr(1));
  const auto& loop = nodeAs<ForLoop>(p.body, 2);
  EXPECT_EQ(loop.index, "i");
  EXPECT_EQ(loop.start, Expr(0));
  EXPECT_EQ(loop.stop, Expr("world - 1"));
  EXPECT_EQ(loop.step, Expr(1));
  ASSERT_EQ(loop.body.size(), 5u);
  EXPECT_EQ(nodeAs<ShareMemHandles>(loop.body, 0).communications,
            (std::vector<std::string>{"s", "r"}));
  const auto& send = nodeAs<Communication>(loop.body, 1);
  EXPECT_EQ(send.type, CommType::Send);
  EXPECT_EQ(send.tensor->str(), "buf[(rank - i + world) % world]");
  EXPECT_EQ(*send.peer, Expr("(rank + 1) % world"));
  EXPECT_EQ(send.backend, "ipc");
  EXPECT_TRUE(send.team.all);
  EXPECT_FALSE(send.input.has_value());
  EXPECT_EQ(nodeAs<Wait>(loop.body, 3).mode, WaitMode::Stream);
  EXPECT_EQ(nodeAs<Check>(nodeAs<ForLoop>(p.body, 3).body, 0).tolerance, 0.0);
}

TEST(Json, EveryNodeAndOptionalFieldSurvivesSaveAndLoad) {
  Program p = parseProgram(test::kEveryNodeJson);
  EXPECT_EQ(p.world_size, 4);
  const auto& ar = nodeAs<Communication>(nodeAs<Group>(p.body, 5).body, 1);
  EXPECT_FALSE(ar.team.all);
  EXPECT_EQ(ar.team.ranks, (std::vector<Expr>{Expr(0), Expr(1), Expr("world - 1")}));
  EXPECT_EQ(ar.reduce, ReduceOp::Sum);
  const auto& branch = nodeAs<If>(nodeAs<ForLoop>(p.body, 16).body, 1);
  EXPECT_EQ(nodeAs<Communication>(branch.then_body, 0).protocol, Protocol::Get);
  EXPECT_EQ(nodeAs<Communication>(branch.else_body, 0).protocol, Protocol::Put);
  EXPECT_EQ(nodeAs<Check>(p.body, 18).tolerance, 0.5);

  for (int indent : {2, -1}) {
    std::string saved = saveProgram(p, indent);
    Program back = parseProgram(saved, "saved");
    EXPECT_EQ(back, p) << saved;
    EXPECT_EQ(saveProgram(back, indent), saved);
  }
}

TEST(Json, ElementwiseNodesRandomFillsAndTensorChecksSurviveSaveAndLoad) {
  Program p = parseProgram(withBody(R"(
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": [8]},
    {"op": "allocate", "name": "h", "dtype": "bfloat16", "shape": [8]},
    {"op": "fill", "tensor": "x", "random": {"seed": "rank + 1", "low": -0.5, "high": 2}},
    {"op": "relu", "input": "x", "output": "x"},
    {"op": "gelu", "input": "x", "output": "x"},
    {"op": "silu", "input": "x", "output": "x"},
    {"op": "scale", "input": "x", "output": "x", "factor": 0.25},
    {"op": "scale", "input": "x", "output": "x", "factor": "world"},
    {"op": "cast", "input": "x", "output": "h"},
    {"op": "check", "tensor": "h", "expected": "x", "rtol": 0.01, "atol": "rank"})"));
  const auto& fill = nodeAs<Fill>(p.body, 2);
  ASSERT_TRUE(fill.random.has_value());
  EXPECT_EQ(fill.random->seed, Expr("rank + 1"));
  EXPECT_EQ(fill.random->low, Real(-0.5));
  EXPECT_EQ(fill.random->high, Real(2.0));
  EXPECT_TRUE(fill.value.empty());
  EXPECT_EQ(nodeAs<Scale>(p.body, 6).factor, Real(0.25));
  EXPECT_EQ(nodeAs<Scale>(p.body, 7).factor, Real(Expr("world")));
  EXPECT_EQ(nodeAs<Cast>(p.body, 8).output.str(), "h");
  const auto& check = nodeAs<Check>(p.body, 9);
  EXPECT_EQ(check.expected->str(), "x");
  EXPECT_EQ(check.rtol, Real(0.01));
  EXPECT_EQ(check.atol, Real(Expr("rank")));
  for (int indent : {2, -1}) {
    std::string saved = saveProgram(p, indent);
    EXPECT_EQ(parseProgram(saved, "saved"), p) << saved;
  }
}

TEST(Json, BadNumbersOfTheNewFieldsNameTheirPointer) {
  auto error = [](const std::string& node) {
    try {
      parseProgram(withBody(R"({"op": "allocate", "name": "x", "dtype": "float32", "shape": [8]},
                               )" + node));
    } catch (const ParseError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(contains(error(R"({"op": "check", "tensor": "x", "expected": "x", "rtol": -1})"),
                       "/body/1/rtol: expected a number >= 0, found -1"));
  EXPECT_TRUE(contains(error(R"({"op": "scale", "input": "x", "output": "x"})"),
                       "missing required key 'factor'"));
  EXPECT_TRUE(contains(error(R"({"op": "relu", "input": "x", "output": "x", "factor": 2})"),
                       "/body/1/factor: unknown key"));
  EXPECT_TRUE(contains(error(R"({"op": "fill", "tensor": "x", "random": {"seed": 1, "lo": 0}})"),
                       "/body/1/random/lo: unknown key"));
  EXPECT_TRUE(contains(error(R"({"op": "fill", "tensor": "x", "random": {"low": 0}})"),
                       "/body/1/random: missing required key 'seed'"));
}

TEST(Json, SaveOmitsDefaultsAndWritesConstantsAsIntegers) {
  Program p = parseProgram(withBody(R"(
    {"op": "for", "index": "i", "start": 0, "stop": "4", "step": 1, "body": [
      {"op": "wait", "communication": "c", "mode": "stream"},
      {"op": "communication", "name": "c", "type": "send", "tensor": "b", "peer": "1 + 1",
       "team": "all", "backend": "auto", "protocol": "auto"}]}
  )"));
  std::string saved = saveProgram(p, -1);
  EXPECT_EQ(saved,
            R"({"format":"hostir/1","name":"t","body":[{"op":"for","index":"i","stop":4,"body":[)"
            R"({"op":"wait","communication":"c"},)"
            R"({"op":"communication","name":"c","type":"send","tensor":"b","peer":"1 + 1"}]}]})");
}

TEST(Json, SaveWritesKeysInFormatOrder) {
  std::string saved = saveProgram(parseProgram(test::kEveryNodeJson));
  auto before = [&](std::string_view a, std::string_view b) {
    return saved.find(a) != std::string::npos && saved.find(a) < saved.find(b);
  };
  EXPECT_TRUE(before("\"format\"", "\"name\""));
  EXPECT_TRUE(before("\"world_size\"", "\"params\""));
  EXPECT_TRUE(before("\"outputs\"", "\"body\""));
  EXPECT_TRUE(before(R"("op": "allocate",)", R"("name": "x")"));
  EXPECT_TRUE(before(R"("n": 8)", R"("chunks": 2)"));  // params keep file order
}

TEST(Json, MalformedJsonNamesLineAndColumn) {
  ParseError e = parseError("{\"format\": \"hostir/1\",\n  \"name\": x}");
  EXPECT_EQ(e.pointer(), "");
  EXPECT_TRUE(contains(e.what(), "/: test.json: invalid JSON at line 2, column 11: ")) << e.what();
  EXPECT_TRUE(contains(e.what(), "invalid literal")) << e.what();
  ParseError end = parseError("{\"format\": \"hostir/1\"");
  EXPECT_TRUE(contains(end.what(), "line 1, column 22")) << end.what();
}

// The parser takes a NUL byte for the end of the text, so a program with
// one went through with whatever followed it unread.
TEST(Json, ANulByteIsRejectedAtItsPlace) {
  std::string text = "{\"format\": \"hostir/1\", \"name\": \"x\", \"body\": []}";
  text += std::string(1, '\0') + "\n{\"this is\": not json";
  ParseError e = parseError(text);
  EXPECT_TRUE(contains(e.what(), "test.json: invalid JSON at line 1, column 48: a NUL byte"))
      << e.what();
}

// Input longer than the limit (a device file such as /dev/zero) is refused
// as it is read, not parsed once it filled the memory.
TEST(Json, TextLongerThanTheLimitIsRefusedAsItIsRead) {
  std::istringstream small(std::string(100, ' '));
  EXPECT_EQ(readProgramText(small, "small.json", 100).size(), 100u);
  std::istringstream large(std::string(101, ' '));
  try {
    readProgramText(large, "large.json", 100);
    ADD_FAILURE() << "101 bytes read under a limit of 100";
  } catch (const ParseError& e) {
    EXPECT_TRUE(contains(e.what(), "cannot read 'large.json': it is longer than 100 bytes"))
        << e.what();
  }
}

TEST(Json, DuplicateKeysAreRejected) {
  ParseError e = parseError(withBody(R"({"op": "wait", "communication": "a", "communication": "b"})"));
  EXPECT_EQ(e.pointer(), "/body/0/communication");
  EXPECT_TRUE(contains(e.what(), "duplicate key 'communication'")) << e.what();
}

TEST(Json, DeepNestingIsRejectedBeforeAnyPassRecursesOverIt) {
  std::string nodes;
  for (int i = 0; i < 150; ++i) nodes += R"({"op": "group", "name": "g", "body": [)";
  for (int i = 0; i < 150; ++i) nodes += "]}";
  ParseError e = parseError(withBody(nodes));
  EXPECT_TRUE(contains(e.what(), "JSON nested more than 200 levels deep")) << e.what();
  EXPECT_EQ(e.pointer().substr(0, 22), "/body/0/body/0/body/0/");
}

TEST(Json, TopLevelMustBeAProgramObject) {
  ParseError e = parseError("[1, 2]");
  EXPECT_EQ(e.pointer(), "");
  EXPECT_TRUE(contains(e.what(), "expected a program object, found an array")) << e.what();
}

TEST(Json, FormatIsRequiredAndChecked) {
  ParseError missing = parseError(R"({"name": "t", "body": []})");
  EXPECT_EQ(missing.pointer(), "");
  EXPECT_TRUE(contains(missing.what(), "missing required key 'format' in program"));
  ParseError wrong = parseError(R"({"format": "hostir/2", "name": "t", "body": []})");
  EXPECT_EQ(wrong.pointer(), "/format");
  EXPECT_TRUE(contains(wrong.what(), "unsupported format 'hostir/2'; expected \"hostir/1\""));
}

TEST(Json, UnknownTopLevelKeyListsTheAcceptedKeys) {
  ParseError e = parseError(R"({"format": "hostir/1", "name": "t", "body": [], "bodyy": []})");
  EXPECT_EQ(e.pointer(), "/bodyy");
  EXPECT_STREQ(e.what(),
               "/bodyy: unknown key 'bodyy' in program; expected one of: format, name, world_size, min_world_size, "
               "params, inputs, outputs, body");
}

TEST(Json, UnknownNestedKeyNamesItsPointer) {
  ParseError e = parseError(withBody(R"(
    {"op": "allocate", "name": "b", "dtype": "int32", "shape": [4]},
    {"op": "fill", "tensor": "b", "value": 0},
    {"op": "for", "index": "i", "stop": 3, "body": [
      {"op": "wait", "communication": "s"},
      {"op": "communication", "name": "s", "type": "send", "tensor": "b", "peerr": 1}]}
  )"));
  EXPECT_EQ(e.pointer(), "/body/2/body/1/peerr");
  EXPECT_TRUE(contains(e.what(), "unknown key 'peerr' in 'communication' node; expected one of: op, "
                                 "name, type, input, output, tensor, peer, root, team, reduce, "
                                 "backend, protocol"))
      << e.what();
}

TEST(Json, KeysWithSlashesAreEscapedInPointers) {
  ParseError e = parseError(withBody(R"({"op": "deallocate", "name": "b", "a/b~c": 1})"));
  EXPECT_EQ(e.pointer(), "/body/0/a~1b~0c");
}

TEST(Json, UnknownOpListsEveryOp) {
  ParseError e = parseError(withBody(R"({"op": "deallocate", "name": "b"}, {"op": "barrier"})"));
  EXPECT_EQ(e.pointer(), "/body/1/op");
  EXPECT_TRUE(contains(e.what(), "unknown op 'barrier'; expected one of \"allocate\", "
                                 "\"deallocate\", \"communication\""))
      << e.what();
  EXPECT_TRUE(contains(e.what(), "\"add\", \"relu\", \"gelu\", \"silu\", \"scale\", \"cast\" or \"kernel\""));
}

TEST(Json, NodeWithoutOpOrNotAnObject) {
  ParseError e = parseError(withBody(R"({"name": "b"})"));
  EXPECT_EQ(e.pointer(), "/body/0");
  EXPECT_TRUE(contains(e.what(), "missing required key 'op' in node"));
  ParseError s = parseError(withBody(R"("allocate")"));
  EXPECT_EQ(s.pointer(), "/body/0");
  EXPECT_TRUE(contains(s.what(), "expected a node object, found a string (\"allocate\")"));
}

TEST(Json, MissingRequiredFieldNamesTheNode) {
  ParseError e = parseError(withBody(R"({"op": "for", "index": "i", "body": []})"));
  EXPECT_EQ(e.pointer(), "/body/0");
  EXPECT_STREQ(e.what(), "/body/0: missing required key 'stop' in 'for' node");
}

TEST(Json, WrongTypeNamesWhatWasExpectedAndFound) {
  ParseError e = parseError(withBody(R"({"op": "for", "index": "i", "stop": true, "body": []})"));
  EXPECT_EQ(e.pointer(), "/body/0/stop");
  EXPECT_STREQ(e.what(),
               "/body/0/stop: expected an integer or an expression string, found a boolean (true)");
  ParseError f = parseError(withBody(R"({"op": "set_stream", "stream": 1.5})"));
  EXPECT_EQ(f.pointer(), "/body/0/stream");
  EXPECT_TRUE(contains(f.what(), "found a non-integer number (1.5)"));
  ParseError body = parseError(withBody(R"({"op": "group", "name": "g", "body": {}})"));
  EXPECT_EQ(body.pointer(), "/body/0/body");
  EXPECT_TRUE(contains(body.what(), "expected an array of nodes, found an object"));
  ParseError shape = parseError(withBody(R"({"op": "allocate", "name": "b", "dtype": "int32", "shape": [4, null]})"));
  EXPECT_EQ(shape.pointer(), "/body/0/shape/1");
  EXPECT_TRUE(contains(shape.what(), "found null"));
}

TEST(Json, BadEnumListsTheChoices) {
  ParseError e = parseError(withBody(R"({"op": "allocate", "name": "b", "dtype": "float8", "shape": [4]})"));
  EXPECT_EQ(e.pointer(), "/body/0/dtype");
  EXPECT_STREQ(e.what(),
               "/body/0/dtype: unknown dtype 'float8'; expected one of \"float32\", \"float64\", "
               "\"float16\", \"bfloat16\", \"int32\", \"int64\" or \"uint8\"");
  ParseError type = parseError(withBody(R"({"op": "communication", "name": "c", "type": "all_reduce"})"));
  EXPECT_EQ(type.pointer(), "/body/0/type");
  EXPECT_TRUE(contains(type.what(), "unknown communication type 'all_reduce'"));
  ParseError mode = parseError(withBody(R"({"op": "wait", "communication": "c", "mode": "busy"})"));
  EXPECT_EQ(mode.pointer(), "/body/0/mode");
  EXPECT_TRUE(contains(mode.what(), "\"stream\" or \"host\""));
}

// Any name loads (an embedder may register backends); validation checks it
// against the registry (ValidateTest.UnknownBackendListsTheRegisteredOnes).
TEST(Json, BackendIsANonEmptyName) {
  ParseError e = parseError(withBody(R"({"op": "communication", "name": "c", "type": "send", "backend": ""})"));
  EXPECT_EQ(e.pointer(), "/body/0/backend");
  EXPECT_TRUE(contains(e.what(), "expected a backend name")) << e.what();
  ParseError number = parseError(withBody(R"({"op": "communication", "name": "c", "type": "send", "backend": 3})"));
  EXPECT_EQ(number.pointer(), "/body/0/backend");
}

TEST(Json, TeamIsAllOrAList) {
  ParseError e = parseError(withBody(R"({"op": "communication", "name": "c", "type": "allreduce", "team": "some"})"));
  EXPECT_EQ(e.pointer(), "/body/0/team");
  EXPECT_TRUE(contains(e.what(), "expected \"all\" or an array of rank expressions"));
  ParseError bad = parseError(withBody(R"({"op": "communication", "name": "c", "type": "allreduce", "team": [0, "1 +"]})"));
  EXPECT_EQ(bad.pointer(), "/body/0/team/1");
}

TEST(Json, BadExpressionNamesItsValue) {
  ParseError e = parseError(withBody(R"(
    {"op": "allocate", "name": "b", "dtype": "int32", "shape": [4]},
    {"op": "fill", "tensor": "b", "value": "rank * (2 +"})"));
  EXPECT_EQ(e.pointer(), "/body/1/value");
  EXPECT_STREQ(e.what(), "/body/1/value: expression 'rank * (2 +': column 12: expected an operand, "
                         "found end of expression");
  ParseError ref = parseError(withBody(R"({"op": "copy", "src": "a[0:1][0]", "dst": "b"})"));
  EXPECT_EQ(ref.pointer(), "/body/0/src");
  EXPECT_TRUE(contains(ref.what(), "a range must be the last index"));
}

TEST(Json, IntegersOutsideInt64AreRejected) {
  ParseError e = parseError(withBody(R"({"op": "set_stream", "stream": 18446744073709551615})"));
  EXPECT_EQ(e.pointer(), "/body/0/stream");
  EXPECT_TRUE(contains(e.what(), "does not fit in 64 bits"));
}

TEST(Json, NamesMustBeIdentifiers) {
  ParseError e = parseError(withBody(R"({"op": "deallocate", "name": "my buf"})"));
  EXPECT_EQ(e.pointer(), "/body/0/name");
  EXPECT_TRUE(contains(e.what(), "expected a name ([A-Za-z_][A-Za-z0-9_]*), found 'my buf'"));
  ParseError index = parseError(withBody(R"({"op": "for", "index": "rank", "stop": 1, "body": []})"));
  EXPECT_EQ(index.pointer(), "/body/0/index");
  EXPECT_TRUE(contains(index.what(), "'rank' is reserved"));
}

TEST(Json, ProgramFieldsAreChecked) {
  ParseError world = parseError(R"({"format": "hostir/1", "name": "t", "world_size": 0, "body": []})");
  EXPECT_EQ(world.pointer(), "/world_size");
  EXPECT_TRUE(contains(world.what(), "expected an integer >= 1, found 0"));
  ParseError param = parseError(R"({"format": "hostir/1", "name": "t", "params": {"world": 2}, "body": []})");
  EXPECT_EQ(param.pointer(), "/params/world");
  EXPECT_TRUE(contains(param.what(), "'world' is reserved"));
  ParseError value = parseError(R"({"format": "hostir/1", "name": "t", "params": {"n": "8"}, "body": []})");
  EXPECT_EQ(value.pointer(), "/params/n");
  EXPECT_TRUE(contains(value.what(), "expected an integer, found a string (\"8\")"));
  ParseError outputs = parseError(R"({"format": "hostir/1", "name": "t", "outputs": "buf", "body": []})");
  EXPECT_EQ(outputs.pointer(), "/outputs");
  ParseError name = parseError(R"({"format": "hostir/1", "name": 3, "body": []})");
  EXPECT_EQ(name.pointer(), "/name");
  ParseError body = parseError(R"({"format": "hostir/1", "name": "t"})");
  EXPECT_EQ(body.pointer(), "");
  EXPECT_TRUE(contains(body.what(), "missing required key 'body' in program"));
}

TEST(Json, ToleranceIsANonNegativeNumber) {
  ParseError e = parseError(withBody(R"({"op": "check", "tensor": "b", "value": 0, "tolerance": -0.5})"));
  EXPECT_EQ(e.pointer(), "/body/0/tolerance");
  EXPECT_TRUE(contains(e.what(), "expected a non-negative number, found -0.5"));
  Program p = parseProgram(withBody(R"({"op": "check", "tensor": "b", "value": 0, "tolerance": 2})"));
  EXPECT_EQ(std::get<Check>(p.body[0].v).tolerance, 2.0);
}

TEST(Json, LoadProgramReadsAFile) {
  std::string path = testing::TempDir() + "/hostir_json_test_ring.json";
  {
    std::ofstream out(path);
    out << test::kRingAllgatherJson;
  }
  EXPECT_EQ(loadProgram(path), parseProgram(test::kRingAllgatherJson));
  std::remove(path.c_str());
}

TEST(Json, LoadProgramOfAMissingFileIsAParseError) {
  try {
    loadProgram("/nonexistent/dir/p.json");
    ADD_FAILURE() << "loaded";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.pointer(), "");
    EXPECT_STREQ(e.what(), "/: cannot read '/nonexistent/dir/p.json': No such file or directory");
  }
}

TEST(Json, MalformedFileNamesTheFile) {
  std::string path = testing::TempDir() + "/hostir_json_test_bad.json";
  {
    std::ofstream out(path);
    out << "{\n\n   ,";
  }
  try {
    loadProgram(path);
    ADD_FAILURE() << "loaded";
  } catch (const ParseError& e) {
    EXPECT_TRUE(contains(e.what(), path + ": invalid JSON at line 3, column 4")) << e.what();
  }
  std::remove(path.c_str());
}

TEST(ApplyParamOverrides, ReplacesDeclaredParams) {
  Program p = parseProgram(R"({"format": "hostir/1", "name": "t", "params": {"n": 8, "m": 2}, "body": []})");
  applyParamOverrides(p, {{"m", 5}, {"n", -1}});
  EXPECT_EQ(p.params, (std::vector<Param>{{"n", -1}, {"m", 5}}));
}

TEST(ApplyParamOverrides, UnknownParamListsTheDeclaredOnes) {
  Program p = parseProgram(R"({"format": "hostir/1", "name": "t", "params": {"n": 8, "m": 2}, "body": []})");
  try {
    applyParamOverrides(p, {{"k", 1}});
    ADD_FAILURE() << "applied";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.pointer(), "/params");
    EXPECT_STREQ(e.what(), "/params: unknown param 'k' given on the command line; declared: n, m");
  }
  Program none = parseProgram(withBody(""));
  try {
    applyParamOverrides(none, {{"k", 1}});
    ADD_FAILURE() << "applied";
  } catch (const ParseError& e) {
    EXPECT_TRUE(contains(e.what(), "unknown param 'k' given on the command line; the program "
                                   "declares none"));
  }
}

// Bad input, exit 2, never an internal error: a number JSON cannot hold,
// and a directory given as the program.
TEST(Json, ANumberTooLargeForJsonIsAParseError) {
  try {
    parseProgram(R"({"format": "hostir/1", "name": "x", "params": {"n": 1e400}, "body": []})");
    FAIL() << "1e400 was accepted";
  } catch (const ParseError& e) {
    EXPECT_TRUE(contains(e.what(), "number overflow parsing '1e400'")) << e.what();
  }
}

TEST(Json, ADirectoryIsNotAProgramFile) {
  try {
    loadProgram(test::examplesDir());
    FAIL() << "a directory loaded";
  } catch (const ParseError& e) {
    EXPECT_TRUE(contains(e.what(), "it is a directory, not a program file")) << e.what();
  }
}

}  // namespace
}  // namespace hir
