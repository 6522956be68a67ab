// JSON load and save: the codecs and one fields() per node kind are the
// format's single description, which load, save and the lists of accepted
// keys all go through.
//
// JSON load and save share one description per node type: fields() lists
// its keys in file order, each with a codec (how a value is read and
// written) and, for optional keys, the default that saving omits. Three
// visitors walk it: KeyCollector (the accepted keys, for "unknown key"
// errors), Loader and Saver.
#include <hostir/json.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <concepts>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "common/check.h"
#include "common/text.h"
#include "ir/json_codecs.h"

namespace hir {

namespace {

// ---------------------------------------------------------------- visitors

// Collects the accepted keys of an object, in order.
struct KeyCollector {
  std::vector<std::string_view> keys;
  template <class T, class C>
  void required(const char* key, T&, const C&) { keys.push_back(key); }
  template <class T, class C>
  void optional(const char* key, T&, const C&, const T&) { keys.push_back(key); }
  template <class T, class C>
  void optional(const char* key, std::optional<T>&, const C&) { keys.push_back(key); }
};

class Loader {
 public:
  // Rejects a non-object and any key outside `accepted`.
  Loader(const Json& obj, std::string ptr, std::string what,
         const std::vector<std::string_view>& accepted)
      : obj_(obj), ptr_(std::move(ptr)), what_(std::move(what)) {
    if (!obj_.is_object()) wrongType(obj_, ptr_, fmt::format("{} object", what_));
    for (const auto& item : obj_.items()) {
      if (std::find(accepted.begin(), accepted.end(), item.key()) == accepted.end())
        throw ParseError(keyPath(ptr_, item.key()),
                         fmt::format("unknown key {} in {}; expected one of: {}", quotedText(item.key()),
                                     what_, joinNames(accepted)));
    }
  }

  template <class T, class C>
  void required(const char* key, T& out, const C& codec) {
    if (!obj_.contains(key))
      throw ParseError(ptr_, fmt::format("missing required key '{}' in {}", key, what_));
    out = codec.read(obj_.at(key), keyPath(ptr_, key));
  }
  template <class T, class C>
  void optional(const char* key, T& out, const C& codec, const T& /*default*/) {
    if (obj_.contains(key)) out = codec.read(obj_.at(key), keyPath(ptr_, key));
  }
  template <class T, class C>
  void optional(const char* key, std::optional<T>& out, const C& codec) {
    if (obj_.contains(key)) out = codec.read(obj_.at(key), keyPath(ptr_, key));
  }

 private:
  const Json& obj_;
  std::string ptr_;
  std::string what_;
};

// Writes every field, omitting optional ones that hold their default, so
// that load(save(p)) == p and saved files stay short.
class Saver {
 public:
  explicit Saver(Json& out) : out_(out) {}
  template <class T, class C>
  void required(const char* key, const T& v, const C& codec) {
    out_[key] = codec.write(v);
  }
  template <class T, class C>
  void optional(const char* key, const T& v, const C& codec, const T& def) {
    if (!(v == def)) out_[key] = codec.write(v);
  }
  template <class T, class C>
  void optional(const char* key, const std::optional<T>& v, const C& codec) {
    if (v) out_[key] = codec.write(*v);
  }

 private:
  Json& out_;
};

// --------------------------------------------------- field descriptions
// One overload per node type (const for saving, mutable for loading). A new
// node kind without one fails to build in readNode and writeNode.

template <class N, class T>
concept Is = std::same_as<std::remove_const_t<N>, T>;

void fields(auto& v, Is<Allocate> auto& n) {
  v.required("name", n.name, kName);
  v.required("dtype", n.dtype, enumCodec(kDTypeNames, "dtype"));
  v.required("shape", n.shape, kExprList);
}

void fields(auto& v, Is<Deallocate> auto& n) { v.required("name", n.name, kName); }

void fields(auto& v, Is<Communication> auto& n) {
  static const Communication d;
  v.required("name", n.name, kName);
  v.required("type", n.type, enumCodec(kCommTypeNames, "communication type"));
  v.optional("input", n.input, kRef);
  v.optional("output", n.output, kRef);
  v.optional("tensor", n.tensor, kRef);
  v.optional("peer", n.peer, kExpr);
  v.optional("root", n.root, kExpr);
  v.optional("team", n.team, TeamCodec{}, d.team);
  v.optional("reduce", n.reduce, enumCodec(kReduceOpNames, "reduce op"));
  v.optional("backend", n.backend, BackendCodec{}, d.backend);
  v.optional("protocol", n.protocol, enumCodec(kProtocolNames, "protocol"), d.protocol);
}

void fields(auto& v, Is<ShareMemHandles> auto& n) {
  v.required("communications", n.communications, kNameList);
}

void fields(auto& v, Is<Wait> auto& n) {
  static const Wait d;
  v.required("communication", n.communication, kName);
  v.optional("mode", n.mode, enumCodec(kWaitModeNames, "wait mode"), d.mode);
}

void fields(auto& v, Is<ForLoop> auto& n) {
  static const ForLoop d;
  v.required("index", n.index, kSymbol);
  v.optional("start", n.start, kExpr, d.start);
  v.required("stop", n.stop, kExpr);
  v.optional("step", n.step, kExpr, d.step);
  v.required("body", n.body, kBody);
}

void fields(auto& v, Is<If> auto& n) {
  static const If d;
  v.required("cond", n.cond, kExpr);
  v.required("then", n.then_body, kBody);
  v.optional("else", n.else_body, kBody, d.else_body);
}

void fields(auto& v, Is<SetStream> auto& n) { v.required("stream", n.stream, kExpr); }
void fields(auto& v, Is<SyncStream> auto& n) { v.required("stream", n.stream, kExpr); }

void fields(auto& v, Is<Group> auto& n) {
  v.required("name", n.name, kName);
  v.required("body", n.body, kBody);
}

void fields(auto& v, Is<RandomFill> auto& n) {
  static const RandomFill d;
  v.required("seed", n.seed, kExpr);
  v.optional("low", n.low, RealCodec{}, d.low);
  v.optional("high", n.high, RealCodec{}, d.high);
}

// An object read and written with fields() (a fill's "random").
template <class T>
struct ObjectCodec {
  const char* what;
  T read(const Json& j, const std::string& ptr) const;
  Json write(const T& value) const;
};

// value is required unless random is given (validation says which).
void fields(auto& v, Is<Fill> auto& n) {
  static const Fill d;
  v.required("tensor", n.tensor, kRef);
  v.optional("value", n.value, kExpr, d.value);
  v.optional("step", n.step, kExpr, d.step);
  v.optional("random", n.random, ObjectCodec<RandomFill>{"a fill's 'random'"});
}

void fields(auto& v, Is<Copy> auto& n) {
  v.required("src", n.src, kRef);
  v.required("dst", n.dst, kRef);
}

// value is required unless expected is given (validation says which).
void fields(auto& v, Is<Check> auto& n) {
  static const Check d;
  v.required("tensor", n.tensor, kRef);
  v.optional("value", n.value, kExpr, d.value);
  v.optional("step", n.step, kExpr, d.step);
  v.optional("expected", n.expected, kRef);
  v.optional("rtol", n.rtol, RealCodec{0.0}, d.rtol);
  v.optional("atol", n.atol, RealCodec{0.0}, d.atol);
  v.optional("tolerance", n.tolerance, ToleranceCodec{}, d.tolerance);
}

void fields(auto& v, Is<Matmul> auto& n) {
  static const Matmul d;
  v.required("a", n.a, kRef);
  v.required("b", n.b, kRef);
  v.required("out", n.out, kRef);
  v.optional("transpose_a", n.transpose_a, kBool, d.transpose_a);
  v.optional("transpose_b", n.transpose_b, kBool, d.transpose_b);
  v.optional("accumulate", n.accumulate, kBool, d.accumulate);
}

void fields(auto& v, Is<Add> auto& n) {
  v.required("a", n.a, kRef);
  v.required("b", n.b, kRef);
  v.required("out", n.out, kRef);
}

template <class N>
concept IsElementwise = requires { std::remove_const_t<N>::op; } &&
                        std::same_as<std::remove_const_t<N>,
                                     Elementwise<std::remove_const_t<N>::op>>;

void fields(auto& v, IsElementwise auto& n) {
  v.required("input", n.input, kRef);
  v.required("output", n.output, kRef);
  if constexpr (std::remove_cvref_t<decltype(n)>::op == UnaryOp::Scale)
    v.required("factor", n.factor, RealCodec{});
}

void fields(auto& v, Is<Kernel> auto& n) {
  static const Kernel d;
  v.required("name", n.name, TextCodec{"a kernel name"});
  v.optional("reads", n.reads, kRefList, d.reads);
  v.optional("writes", n.writes, kRefList, d.writes);
  v.optional("args", n.args, ArgsCodec{}, d.args);
}

// The program's keys after "format", which is checked first on its own.
void fields(auto& v, Is<Program> auto& p) {
  static const Program d;
  v.required("name", p.name, TextCodec{"a program name"});
  v.optional("world_size", p.world_size, IntCodec{1});
  v.optional("min_world_size", p.min_world_size, IntCodec{1});
  v.optional("params", p.params, ParamsCodec{}, d.params);
  v.optional("inputs", p.inputs, kNameList, d.inputs);
  v.optional("outputs", p.outputs, kNameList, d.outputs);
  v.required("body", p.body, kBody);
}

// Accepted keys of T's object, `first` ("op" or "format") leading.
template <class T>
const std::vector<std::string_view>& acceptedKeys(std::string_view first) {
  static const std::vector<std::string_view> keys = [&] {
    KeyCollector c;
    if (!first.empty()) c.keys.push_back(first);
    T dummy;
    fields(c, dummy);
    return c.keys;
  }();
  return keys;
}

template <class T>
T ObjectCodec<T>::read(const Json& j, const std::string& ptr) const {
  T out;
  Loader loader(j, ptr, what, acceptedKeys<T>(""));
  fields(loader, out);
  return out;
}

template <class T>
Json ObjectCodec<T>::write(const T& value) const {
  Json out = Json::object();
  Saver saver(out);
  fields(saver, value);
  return out;
}

// ------------------------------------------------------------ nodes, bodies

std::string opChoices() {
  std::string out;
  constexpr std::size_t n = std::size(kNodeOpNames);
  for (std::size_t i = 0; i < n; ++i)
    out += fmt::format("{}\"{}\"", i == 0 ? "" : (i + 1 == n ? " or " : ", "), kNodeOpNames[i]);
  return out;
}

template <class T>
Node readNodeOf(const Json& j, const std::string& ptr, std::string_view op) {
  T node;
  Loader loader(j, ptr, fmt::format("'{}' node", op), acceptedKeys<T>("op"));
  fields(loader, node);
  return node;
}

Node readNode(const Json& j, const std::string& ptr) {
  if (!j.is_object()) wrongType(j, ptr, "a node object");
  if (!j.contains("op")) throw ParseError(ptr, "missing required key 'op' in node");
  const std::string op_ptr = keyPath(ptr, "op");
  const std::string op = kString.read(j.at("op"), op_ptr);
#define HIR_X(Type, name) \
  if (op == name) return readNodeOf<Type>(j, ptr, op);
  HIR_NODE_KINDS(HIR_X)
#undef HIR_X
  throwBadEnum(op_ptr, "op", op, opChoices());
}

Json writeNode(const Node& node) {
  Json out = Json::object();
  out["op"] = std::string(node.op());
  Saver saver(out);
  // fields() has one overload per node type and no catch-all.
  std::visit([&](const auto& n) { fields(saver, n); }, node.v);
  return out;
}

Body BodyCodec::read(const Json& j, const std::string& ptr) const {
  if (!j.is_array()) wrongType(j, ptr, "an array of nodes");
  Body body;
  body.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) body.push_back(readNode(j[i], indexPath(ptr, i)));
  return body;
}

Json BodyCodec::write(const Body& body) const {
  Json out = Json::array();
  for (const Node& n : body) out.push_back(writeNode(n));
  return out;
}

// ---------------------------------------------------------- the document

// Deepest JSON nesting accepted (a node nests two levels: its object and a
// body array). Every pass over the IR recurses over nested bodies, so a
// hostile file must not reach them with unbounded depth.
constexpr std::size_t kMaxJsonDepth = 200;

// Builds the document while checking what nlohmann would let through:
// duplicate keys (it keeps the last one silently) and excessive nesting. A
// stack of frames tracks the JSON pointer so the error names the place. A
// SAX handler around nlohmann's own DOM builder: its callback parser scans
// the whole enclosing array at the end of every object (quadratic: a 37 MB
// program of 450k nodes took two minutes to load).
class StrictSax {
 public:
  explicit StrictSax(Json& out) : dom_(out) {}

  bool null() { return childBegins(), dom_.null(); }
  bool boolean(bool v) { return childBegins(), dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return childBegins(), dom_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return childBegins(), dom_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const std::string& text) {
    return childBegins(), dom_.number_float(v, text);
  }
  bool string(std::string& v) { return childBegins(), dom_.string(v); }
  bool binary(Json::binary_t& v) { return childBegins(), dom_.binary(v); }
  bool start_object(std::size_t n) { return open(false), dom_.start_object(n); }
  bool start_array(std::size_t n) { return open(true), dom_.start_array(n); }
  bool end_object() { return frames_.pop_back(), dom_.end_object(); }
  bool end_array() { return frames_.pop_back(), dom_.end_array(); }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    f.key = k;
    if (!f.seen.insert(k).second) throw ParseError(pointer(), fmt::format("duplicate key {}", quotedText(k)));
    return dom_.key(k);
  }
  template <class Exception>  // the exact type: nlohmann throws a copy of it
  bool parse_error(std::size_t pos, const std::string& token, const Exception& e) {
    return dom_.parse_error(pos, token, e);  // throws e
  }

 private:
  struct Frame {
    bool array;
    std::string key;  // objects: the current key
    long index;       // arrays: the current element
    std::unordered_set<std::string> seen;
  };
  void open(bool array) {
    childBegins();
    if (frames_.size() >= kMaxJsonDepth)
      throw ParseError(pointer(), fmt::format("JSON nested more than {} levels deep", kMaxJsonDepth));
    frames_.push_back({array, {}, -1, {}});
  }
  void childBegins() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  std::string pointer() const {
    std::string out;
    for (const Frame& f : frames_)
      out = f.array ? indexPath(out, static_cast<std::size_t>(f.index)) : keyPath(out, f.key);
    return out;
  }
  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::vector<Frame> frames_;
};

// Line and column (1-based) of the byte nlohmann stopped at.
std::pair<std::size_t, std::size_t> lineColumn(std::string_view text, std::size_t byte) {
  const std::size_t at = std::min(byte > 0 ? byte - 1 : 0, text.size());
  const std::string_view before = text.substr(0, at);
  const std::size_t line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  const std::size_t nl = before.rfind('\n');
  return {line, nl == std::string_view::npos ? at + 1 : at - nl};
}

// nlohmann's message without its "[json.exception...] parse error at line L,
// column C: " prefix (we compute the place ourselves).
std::string parseErrorDetail(const std::string& what) {
  std::size_t col = what.find("column ");
  std::size_t colon = col == std::string::npos ? std::string::npos : what.find(": ", col);
  if (colon != std::string::npos) return what.substr(colon + 2);
  std::size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

Json parseJson(std::string_view text, std::string_view source) {
  // The parser takes a NUL byte for the end of the text: what follows would
  // be ignored unseen.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    auto [line, column] = lineColumn(text, nul + 1);
    throw ParseError("", fmt::format("{}: invalid JSON at line {}, column {}: a NUL byte (a "
                                     "program is text)",
                                     source, line, column));
  }
  Json out;
  StrictSax sax(out);
  try {
    Json::sax_parse(text.begin(), text.end(), &sax);
    return out;
  } catch (const nlohmann::json::parse_error& e) {
    auto [line, column] = lineColumn(text, e.byte);
    throw ParseError("", fmt::format("{}: invalid JSON at line {}, column {}: {}", source, line,
                                     column, parseErrorDetail(e.what())));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number JSON cannot hold (1e400): bad input, not a bug of hostir.
    throw ParseError("", fmt::format("{}: invalid JSON: {}", source, parseErrorDetail(e.what())));
  }
}

}  // namespace

Program parseProgram(std::string_view text, std::string_view source) {
  const Json doc = parseJson(text, source);
  if (!doc.is_object()) wrongType(doc, "", "a program object");
  if (!doc.contains("format"))
    throw ParseError("", fmt::format("missing required key 'format' in program (\"format\": \"{}\")",
                                     kFormatName));
  const std::string format = kString.read(doc.at("format"), "/format");
  if (format != kFormatName)
    throw ParseError("/format",
                     fmt::format("unsupported format {}; expected \"{}\"", quotedText(format),
                                 kFormatName));
  Program program;
  Loader loader(doc, "", "program", acceptedKeys<Program>("format"));
  fields(loader, program);
  return program;
}

std::string saveProgram(const Program& program, int indent) {
  Json doc = Json::object();
  doc["format"] = std::string(kFormatName);
  Saver saver(doc);
  fields(saver, program);
  try {
    return doc.dump(indent);
  } catch (const nlohmann::json::type_error& e) {  // a string that is not UTF-8
    throw ProgramError(fmt::format("cannot save program '{}' as JSON: {}", program.name, e.what()));
  }
}

}  // namespace hir
