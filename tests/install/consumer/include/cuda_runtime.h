// Found first on the consumer's include path: hostir's public headers must
// not include cuda_runtime.h.
#error "a public hostir header included <cuda_runtime.h>"
