#include "common/text.h"
#include <hostir/types.h>

#include "common/check.h"

namespace hir {

void throwBadEnum(std::string_view pointer, std::string_view what, std::string_view text,
                  const std::string& choices) {
  throw ParseError(std::string(pointer),
                   fmt::format("unknown {} {}; expected one of {}", what, quotedText(text), choices));
}

}  // namespace hir
