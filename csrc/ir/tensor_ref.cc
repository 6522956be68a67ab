#include <hostir/tensor_ref.h>

#include <fmt/format.h>

#include <algorithm>

#include "common/check.h"

namespace hir {

namespace {

constexpr std::string_view kSpaces = " \t\r\n";

class RefParser {
 public:
  RefParser(std::string_view text, std::string_view pointer) : text_(text), pointer_(pointer) {}

  TensorRef parse() {
    TensorRef ref;
    skipSpace();
    const std::size_t start = pos_;
    const std::size_t end = std::min(text_.find_first_of("[ \t\r\n", start), text_.size());
    ref.name = std::string(text_.substr(start, end - start));
    if (!isIdentifier(ref.name)) fail("a tensor name ([A-Za-z_][A-Za-z0-9_]*)", ref.name);
    pos_ = end;
    for (skipSpace(); pos_ < text_.size(); skipSpace()) {
      if (text_[pos_] != '[') fail("'[' or the end of the reference");
      if (ref.range)
        failWith(fmt::format("a range must be the last index: '{}' is not contiguous", text_));
      parseIndex(ref);
    }
    return ref;
  }

 private:
  void skipSpace() { pos_ = std::min(text_.find_first_not_of(kSpaces, pos_), text_.size()); }

  [[noreturn]] void failWith(const std::string& message) const {
    throw ParseError(std::string(pointer_),
                     fmt::format("tensor reference '{}': {}", text_, message));
  }
  // `found`: the offending text; by default the character at pos_.
  [[noreturn]] void fail(std::string_view expected,
                         std::optional<std::string_view> found_text = std::nullopt) const {
    if (!found_text && pos_ < text_.size()) found_text = text_.substr(pos_, 1);
    std::string found = found_text && !found_text->empty() ? fmt::format("'{}'", *found_text)
                                                           : std::string("the end of the reference");
    failWith(fmt::format("column {}: expected {}, found {}", pos_ + 1, expected, found));
  }

  // One bracket: `[e]` (a select) or `[a:b]` (a range). Expressions hold no
  // brackets, so the first ']' outside parentheses closes the index, and a
  // ':' outside parentheses separates a range.
  void parseIndex(TensorRef& ref) {
    const std::size_t open = pos_++;
    std::size_t colon = std::string_view::npos;
    int parens = 0;
    for (; pos_ < text_.size(); ++pos_) {
      char c = text_[pos_];
      if (c == '(') ++parens;
      if (c == ')') --parens;
      if (parens > 0) continue;
      if (c == ']') break;
      if (c == ':') {
        if (colon != std::string_view::npos) fail("']' (a range has one ':')");
        colon = pos_;
      }
    }
    if (pos_ >= text_.size())
      failWith(fmt::format("column {}: '[' is never closed", open + 1));
    const std::size_t close = pos_++;
    if (colon == std::string_view::npos) {
      ref.select.push_back(parseExpr(open + 1, close));
    } else {
      Expr begin = parseExpr(open + 1, colon);
      Expr end = parseExpr(colon + 1, close);
      ref.range.emplace(std::move(begin), std::move(end));
    }
  }

  Expr parseExpr(std::size_t begin, std::size_t end) {
    std::string_view part = text_.substr(begin, end - begin);
    if (part.find_first_not_of(kSpaces) == std::string_view::npos) {
      pos_ = end;
      fail("an index expression");
    }
    return Expr::parse(part, pointer_);
  }

  std::string_view text_;
  std::string_view pointer_;
  std::size_t pos_ = 0;
};

}  // namespace

TensorRef TensorRef::parse(std::string_view text, std::string_view pointer) {
  return RefParser(text, pointer).parse();
}

std::string TensorRef::str() const {
  std::string out = name;
  for (const Expr& e : select) out += fmt::format("[{}]", e.str());
  if (range) out += fmt::format("[{}:{}]", range->first.str(), range->second.str());
  return out;
}

}  // namespace hir
