// Found first on the consumer's include path: hostir's public headers must
// not include mpi.h.
#error "a public hostir header included <mpi.h>"
