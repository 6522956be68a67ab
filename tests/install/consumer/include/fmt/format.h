// Found first on the consumer's include path: hostir's public headers must
// not include fmt/format.h.
#error "a public hostir header included <fmt/format.h>"
