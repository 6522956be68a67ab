# Installs hostir into a scratch prefix, then configures, builds and runs an
# out-of-tree project that uses find_package(hostir) and hostir::hostir, and
# one that uses the test harness (hostir::gtest_main, docs/testing.md) and
# runs its tests under mpirun at 2 ranks.
# Inputs: HIR_BUILD, HIR_SOURCE, CONSUMER_WORK.
file(REMOVE_RECURSE ${CONSUMER_WORK})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(step_out "${out}" PARENT_SCOPE)
endfunction()
step(${CMAKE_COMMAND} --install ${HIR_BUILD} --prefix ${CONSUMER_WORK}/prefix)
# Only the public headers are installed, all under include/hostir/.
file(GLOB_RECURSE installed RELATIVE ${CONSUMER_WORK}/prefix/include ${CONSUMER_WORK}/prefix/include/*)
file(GLOB public RELATIVE ${HIR_SOURCE}/csrc ${HIR_SOURCE}/csrc/hostir/*.h)
list(SORT installed)
list(SORT public)
if(NOT installed STREQUAL public)
  message(FATAL_ERROR "installed headers differ from csrc/hostir/:\n  installed: ${installed}\n  public:    ${public}")
endif()
step(${CMAKE_COMMAND} -S ${HIR_SOURCE}/tests/install/consumer -B ${CONSUMER_WORK}/build
     -DCMAKE_PREFIX_PATH=${CONSUMER_WORK}/prefix)
step(${CMAKE_COMMAND} --build ${CONSUMER_WORK}/build)
step(${CONSUMER_WORK}/build/consumer)
if(NOT step_out MATCHES "consumer: ok")
  message(FATAL_ERROR "the consumer did not report success:\n${step_out}")
endif()
message(STATUS "${step_out}")

# The harness: the example of docs/testing.md passes at 2 ranks; with a test
# that fails on rank 1, every rank exits 1 and rank 0's summary names rank 1.
set(tests ${CONSUMER_WORK}/gtest-build)
step(${CMAKE_COMMAND} -S ${HIR_SOURCE}/tests/install/gtest_consumer -B ${tests}
     -DCMAKE_PREFIX_PATH=${CONSUMER_WORK}/prefix)
step(${CMAKE_COMMAND} --build ${tests})
load_cache(${tests} READ_WITH_PREFIX consumer_ MPIEXEC_EXECUTABLE)
if(NOT consumer_MPIEXEC_EXECUTABLE)
  message(FATAL_ERROR "find_package(hostir COMPONENTS gtest_main) did not find mpirun (MPIEXEC_EXECUTABLE)")
endif()
step(${consumer_MPIEXEC_EXECUTABLE} -np 2 ${tests}/allreduce_test --gtest_color=no)
if(NOT step_out MATCHES "\\[       OK \\] Allreduce.SumOfEveryRankReachesEveryRank.*\\[hir\\] PASSED on all 2 ranks\n")
  message(FATAL_ERROR "allreduce_test at 2 ranks did not pass:\n${step_out}")
endif()
get_filename_component(cmake_bin ${CMAKE_COMMAND} DIRECTORY)
step(${cmake_bin}/ctest --test-dir ${tests} --output-on-failure)
execute_process(COMMAND ${consumer_MPIEXEC_EXECUTABLE} -np 2 ${tests}/rank_one_fails --gtest_color=no
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 1 OR NOT out MATCHES "\\[hir\\] FAILED on rank 1: RankOne.FailsOnPurpose\n"
   OR NOT out MATCHES "\\[rank 1\\] rank 1 fails on purpose")
  message(FATAL_ERROR "rank_one_fails at 2 ranks: expected exit 1 and the summary naming rank 1, "
                      "found exit ${rc}:\n${out}\n${err}")
endif()
message(STATUS "harness consumer: ok")
