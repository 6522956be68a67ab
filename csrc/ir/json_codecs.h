// The JSON codecs of the IR (private to ir/json.cc, which includes it once):
// how each kind of value is read from and written to JSON, with the error
// that names the place (a JSON pointer) when it does not fit.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/error.h>
#include <hostir/program.h>
#include "common/check.h"
#include "common/text.h"

namespace hir {
namespace {

// ordered_json keeps keys in file order: params stay in declaration order and
// saved files list "op" first.
using Json = nlohmann::ordered_json;

std::string keyPath(std::string_view parent, const std::string& key) {
  return std::string(parent) + (Json::json_pointer() / key).to_string();
}

std::string indexPath(std::string_view parent, std::size_t i) {
  return fmt::format("{}/{}", parent, i);
}

// "an integer (5)", "an array": what a value is, for "found ..." messages.
std::string describe(const Json& j) {
  auto shown = [&] {
    std::string text = j.dump();
    return text.size() > 40 ? text.substr(0, 37) + "..." : text;
  };
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return fmt::format("a boolean ({})", shown());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return fmt::format("an integer ({})", shown());
    case Json::value_t::number_float: return fmt::format("a non-integer number ({})", shown());
    case Json::value_t::string: return fmt::format("a string ({})", shown());
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

[[noreturn]] void wrongType(const Json& j, const std::string& ptr, std::string_view expected) {
  throw ParseError(ptr, fmt::format("expected {}, found {}", expected, describe(j)));
}

std::string joinNames(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) out += fmt::format("{}{}", out.empty() ? "" : ", ", n);
  return out;
}

// ------------------------------------------------------------------ codecs
// Each codec: T read(const Json&, const std::string& pointer) and
// Json write(const T&).

struct StringCodec {
  std::string read(const Json& j, const std::string& ptr) const {
    if (!j.is_string()) wrongType(j, ptr, "a string");
    return j.get<std::string>();
  }
  Json write(const std::string& s) const { return s; }
};

// Free text that messages and listings print (the program's and a kernel's
// name): printable (no control or bidirectional characters, valid UTF-8)
// and at most 256 bytes, so that printing it can neither fake nor hide
// output.
struct TextCodec {
  const char* what;
  std::string read(const Json& j, const std::string& ptr) const {
    std::string s = StringCodec{}.read(j, ptr);
    if (auto error = textError(what, s)) throw ParseError(ptr, *error);
    return s;
  }
  Json write(const std::string& s) const { return s; }
};

// Names of tensors, communications and groups: referenced from tensor
// references and waits, so they must be identifiers. `symbol` names (params,
// loop indices) appear in expressions and cannot shadow rank, world, min, max.
struct NameCodec {
  bool symbol = false;
  std::string read(const Json& j, const std::string& ptr) const {
    std::string s = StringCodec{}.read(j, ptr);
    if (!isIdentifier(s))
      throw ParseError(ptr, fmt::format("expected a name ([A-Za-z_][A-Za-z0-9_]*), found {}",
                                        quotedText(s)));
    if (symbol && (s == "rank" || s == "world" || s == "min" || s == "max"))
      throw ParseError(ptr, fmt::format("'{}' is reserved in expressions; choose another name", s));
    return s;
  }
  Json write(const std::string& s) const { return s; }
};

struct IntCodec {
  int64_t min = INT64_MIN;
  int64_t read(const Json& j, const std::string& ptr) const {
    if (!j.is_number_integer()) wrongType(j, ptr, "an integer");
    if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t{INT64_MAX})
      throw ParseError(ptr, fmt::format("integer {} does not fit in 64 bits", j.dump()));
    int64_t v = j.get<int64_t>();
    if (v < min) throw ParseError(ptr, fmt::format("expected an integer >= {}, found {}", min, v));
    return v;
  }
  Json write(int64_t v) const { return v; }
};

// An expression: a JSON integer or a string. Constants are saved as integers.
struct ExprCodec {
  Expr read(const Json& j, const std::string& ptr) const {
    if (j.is_number_integer()) return Expr(IntCodec{}.read(j, ptr));
    if (j.is_string()) return Expr::parse(j.get<std::string>(), ptr);
    wrongType(j, ptr, "an integer or an expression string");
  }
  Json write(const Expr& e) const {
    HIR_INTERNAL_ASSERT(!e.empty(), "saving an empty expression");
    if (auto c = e.constant()) return *c;
    return e.str();
  }
};

struct RefCodec {
  TensorRef read(const Json& j, const std::string& ptr) const {
    return TensorRef::parse(StringCodec{}.read(j, ptr), ptr);
  }
  Json write(const TensorRef& r) const { return r.str(); }
};

struct ToleranceCodec {
  double read(const Json& j, const std::string& ptr) const {
    if (!j.is_number()) wrongType(j, ptr, "a non-negative number");
    double v = j.get<double>();
    if (!(v >= 0)) throw ParseError(ptr, fmt::format("expected a non-negative number, found {}", v));
    return v;
  }
  Json write(double v) const { return v; }
};

// A real number: a JSON number, or an expression string evaluated when the
// node runs. `min`: the least number accepted (checked here for numbers and
// at run time for expressions).
struct RealCodec {
  double min = -HUGE_VAL;
  Real read(const Json& j, const std::string& ptr) const {
    if (j.is_string()) return Real(Expr::parse(j.get<std::string>(), ptr));
    if (!j.is_number()) wrongType(j, ptr, "a number or an expression string");
    const double v = j.get<double>();
    if (!std::isfinite(v) || v < min)
      throw ParseError(ptr, min == -HUGE_VAL
                                ? fmt::format("expected a finite number, found {}", j.dump())
                                : fmt::format("expected a number >= {}, found {}", min, j.dump()));
    return Real(v);
  }
  Json write(const Real& r) const {
    if (r.isExpr()) return ExprCodec{}.write(r.expr);
    if (r.number == std::floor(r.number) && std::fabs(r.number) < 0x1p53)
      return static_cast<int64_t>(r.number);
    return r.number;
  }
};

template <class E, std::size_t N>
struct EnumCodec {
  const std::pair<E, std::string_view> (*table)[N];
  std::string_view what;
  E read(const Json& j, const std::string& ptr) const {
    return parseEnum(*table, StringCodec{}.read(j, ptr), ptr, what);
  }
  Json write(E v) const { return std::string(enumName(*table, v)); }
};
template <class E, std::size_t N>
EnumCodec<E, N> enumCodec(const std::pair<E, std::string_view> (&table)[N], std::string_view what) {
  return {&table, what};
}

// Backends are named by string: "auto" or a name of the registry, which an
// embedder may extend at run time, so validation (not the reader) checks
// that the name exists and that the backend takes the other fields.
struct BackendCodec {
  std::string read(const Json& j, const std::string& ptr) const {
    std::string s = StringCodec{}.read(j, ptr);
    if (s.empty())
      throw ParseError(ptr, "expected a backend name (\"auto\" or a registered backend), found "
                            "an empty string");
    return s;
  }
  Json write(const std::string& s) const { return s; }
};

template <class Element>
struct ListCodec {
  Element element;
  auto read(const Json& j, const std::string& ptr) const {
    if (!j.is_array()) wrongType(j, ptr, "an array");
    std::vector<decltype(element.read(j, ptr))> out;
    for (std::size_t i = 0; i < j.size(); ++i) out.push_back(element.read(j[i], indexPath(ptr, i)));
    return out;
  }
  template <class T>
  Json write(const std::vector<T>& values) const {
    Json out = Json::array();
    for (const T& v : values) out.push_back(element.write(v));
    return out;
  }
};

// "all" or a list of rank expressions.
struct TeamCodec {
  Team read(const Json& j, const std::string& ptr) const {
    if (j.is_string() && j.get<std::string>() == "all") return Team{};
    if (!j.is_array()) wrongType(j, ptr, "\"all\" or an array of rank expressions");
    return Team{false, ListCodec<ExprCodec>{}.read(j, ptr)};
  }
  Json write(const Team& t) const {
    return t.all ? Json("all") : ListCodec<ExprCodec>{}.write(t.ranks);
  }
};

// Params: an object name -> integer, in file order.
struct ParamsCodec {
  std::vector<Param> read(const Json& j, const std::string& ptr) const {
    if (!j.is_object()) wrongType(j, ptr, "an object of integer params");
    std::vector<Param> out;
    for (const auto& [name, value] : j.items()) {
      std::string p = keyPath(ptr, name);
      out.push_back({NameCodec{true}.read(Json(name), p), IntCodec{}.read(value, p)});
    }
    return out;
  }
  Json write(const std::vector<Param>& params) const {
    Json out = Json::object();
    for (const Param& p : params) out[p.name] = p.value;
    return out;
  }
};

struct BoolCodec {
  bool read(const Json& j, const std::string& ptr) const {
    if (!j.is_boolean()) wrongType(j, ptr, "true or false");
    return j.get<bool>();
  }
  Json write(bool v) const { return v; }
};

// A kernel's args: an object name -> expression, kept sorted by name.
struct ArgsCodec {
  std::vector<std::pair<std::string, Expr>> read(const Json& j, const std::string& ptr) const {
    if (!j.is_object()) wrongType(j, ptr, "an object of expressions");
    std::vector<std::pair<std::string, Expr>> out;
    for (const auto& [name, value] : j.items()) {
      std::string p = keyPath(ptr, name);
      out.emplace_back(NameCodec{true}.read(Json(name), p), ExprCodec{}.read(value, p));
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
  }
  Json write(const std::vector<std::pair<std::string, Expr>>& args) const {
    Json out = Json::object();
    for (const auto& [name, e] : args) out[name] = ExprCodec{}.write(e);
    return out;
  }
};

struct BodyCodec {
  Body read(const Json& j, const std::string& ptr) const;
  Json write(const Body& body) const;
};

constexpr StringCodec kString;
constexpr NameCodec kName;
constexpr NameCodec kSymbol{true};
constexpr ExprCodec kExpr;
constexpr RefCodec kRef;
constexpr BodyCodec kBody;
constexpr ListCodec<NameCodec> kNameList;
constexpr ListCodec<ExprCodec> kExprList;
constexpr ListCodec<RefCodec> kRefList;
constexpr BoolCodec kBool;

}  // namespace
}  // namespace hir
