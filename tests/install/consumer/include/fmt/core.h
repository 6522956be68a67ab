// Found first on the consumer's include path: hostir's public headers must
// not include fmt/core.h.
#error "a public hostir header included <fmt/core.h>"
