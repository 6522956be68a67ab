// Found first on the consumer's include path: hostir's public headers must
// not include cuda.h.
#error "a public hostir header included <cuda.h>"
