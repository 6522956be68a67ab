// The main() of hostir::gtest_main: GoogleTest under mpirun, one verdict for
// all ranks (<hostir/testing.h>, docs/testing.md).
#include <hostir/testing.h>

int main(int argc, char** argv) { return hir::test::runAllTests(&argc, &argv); }
