// Found first on the consumer's include path: hostir's public headers must
// not include nccl.h.
#error "a public hostir header included <nccl.h>"
