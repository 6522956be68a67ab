#!/bin/sh
# A launcher for tests of `hir run --np`: writes the arguments it was given,
# one per line, to the file named in HIR_FAKE_MPIRUN_ARGV, starts no rank
# and exits 0. Used as HIR_MPIRUN="sh tests/tools/data/fake_mpirun.sh ...".
printf '%s\n' "$@" > "$HIR_FAKE_MPIRUN_ARGV"
