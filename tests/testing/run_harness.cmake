# Runs tests/testing/harness_fixture.cc under mpirun at 2 ranks, one
# scenario per --gtest_filter, and checks the harness's exit status and
# output (docs/testing.md). Inputs: MPIEXEC, FIXTURE, WORK.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(failures 0)

# scenario(NAME FILTER RC [ARGS arg...] [ENV VAR=VALUE...] [EXPECT regex...]
#          [REJECT regex...]): runs the fixture with FILTER, the arguments and
# the environment given, and checks that it exits RC (a number, or
# "nonzero") and that its standard
# output and error together match every EXPECT and no REJECT.
function(scenario name filter rc)
  cmake_parse_arguments(S "" "" "ARGS;ENV;EXPECT;REJECT" ${ARGN})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env ${S_ENV}
      ${MPIEXEC} -np 2 ${FIXTURE} --gtest_color=no --gtest_filter=${filter} ${S_ARGS}
    WORKING_DIRECTORY ${WORK}
    RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  set(all "${out}\n${err}")
  set(problems "")
  if(rc STREQUAL "nonzero" AND (NOT got MATCHES "^[0-9]+$" OR got EQUAL 0))
    string(APPEND problems "  exit status ${got}, expected a non-zero status\n")
  elseif(NOT rc STREQUAL "nonzero" AND NOT "${got}" STREQUAL "${rc}")
    string(APPEND problems "  exit status ${got}, expected ${rc}\n")
  endif()
  foreach(re IN LISTS S_EXPECT)
    if(NOT all MATCHES "${re}")
      string(APPEND problems "  no match for '${re}'\n")
    endif()
  endforeach()
  foreach(re IN LISTS S_REJECT)
    if(all MATCHES "${re}")
      string(APPEND problems "  unexpected match for '${re}'\n")
    endif()
  endforeach()
  if(problems)
    message(SEND_ERROR "scenario ${name} (${filter}):\n${problems}--- output:\n${all}")
  else()
    message(STATUS "ok: ${name}")
  endif()
endfunction()

scenario(passes Fixture.AllgatherSeesEveryRank 0
  EXPECT "\\[  PASSED  \\] 1 test" "\\[hir\\] PASSED on all 2 ranks\n"
  REJECT "\\[rank 1\\]" "FAILED")

# Rank 0 passes, rank 1 fails: rank 0's GoogleTest says PASSED, the final
# summary (printed after it) says which test failed where; both ranks exit 1.
scenario(fails_on_rank_one Fixture.AllgatherSeesEveryRank:Fixture.FailsOnRankOne 1
  EXPECT "\\[rank 1\\] [^\n]*harness_fixture.cc:[0-9]+: Failure"
         "\\[rank 1\\] rank 1 fails on purpose"
         "\\[rank 1\\] FAILED Fixture.FailsOnRankOne"
         "\\[  PASSED  \\] 2 tests.*\\[hir\\] FAILED on rank 1: Fixture.FailsOnRankOne\n\\[hir\\] FAILED on 1 of 2 ranks \\(1 failed test\\)"
  REJECT "\\[rank 0\\]" "AllgatherSeesEveryRank\n\\[hir\\]")

scenario(fails_everywhere Fixture.FailsOnEveryRank 1
  EXPECT "\\[hir\\] FAILED on ranks 0-1: Fixture.FailsOnEveryRank\n\\[hir\\] FAILED on 2 of 2 ranks")

scenario(world_requirements Fixture.RunsWithExactlyTwoRanks:Fixture.Needs* 0
  EXPECT "\\[       OK \\] Fixture.RunsWithExactlyTwoRanks"
         "needs exactly 3 ranks, the world has 2\n\\[  SKIPPED \\] Fixture.NeedsExactlyThreeRanks"
         "needs at least 5 ranks, the world has 2\n\\[  SKIPPED \\] Fixture.NeedsAtLeastFiveRanks"
         "\\[hir\\] PASSED on all 2 ranks")

# One result file per rank, whichever way the path is given.
scenario(xml_file Fixture.FailsOnRankOne 1 EXPECT "FAILED on rank 1"
  ENV GTEST_OUTPUT=xml:out/report.xml)
scenario(xml_flag_dir Fixture.FailsOnRankOne 1 ARGS --gtest_output=xml:dir/
  EXPECT "FAILED on rank 1")
get_filename_component(program ${FIXTURE} NAME)
foreach(file out/report.rank0.xml out/report.rank1.xml
             dir/${program}.rank0.xml dir/${program}.rank1.xml)
  if(NOT EXISTS ${WORK}/${file})
    message(SEND_ERROR "scenario xml: no ${file} in ${WORK}")
  endif()
endforeach()
if(EXISTS ${WORK}/out/report.rank1.xml AND EXISTS ${WORK}/out/report.rank0.xml)
  file(READ ${WORK}/out/report.rank1.xml rank1)
  file(READ ${WORK}/out/report.rank0.xml rank0)
  if(NOT rank1 MATCHES "failures=\"1\"" OR NOT rank0 MATCHES "failures=\"0\"")
    message(SEND_ERROR "scenario xml: rank 0's file should count 0 failures, rank 1's 1:\n${rank0}\n${rank1}")
  endif()
endif()

scenario(bad_end_timeout Fixture.AllgatherSeesEveryRank 2 ENV HIR_TEST_END_TIMEOUT_S=soon
  EXPECT "HIR_TEST_END_TIMEOUT_S: expected a whole number of seconds from 1 to 86400, found 'soon'")

# A rank that ends inside a test, whatever its status: it has not finalized
# MPI, so mpirun ends the others at once instead of them waiting for it.
scenario(rank_exits Fixture.RankOneExits 7
  EXPECT "Exit code: +7" REJECT "\\[hir\\] PASSED")
scenario(rank_exits_with_zero Fixture.RankOneExitsWithZero nonzero
  EXPECT "exited without calling \"?finalize" REJECT "\\[hir\\] PASSED")
scenario(rank_crashes Fixture.RankOneCrashes nonzero
  EXPECT "rank 1 [^\n]*exited on signal 6" REJECT "\\[hir\\] PASSED")
# A rank that hangs inside a test: rank 0, which ended it, waits for the
# others to end it too, at most HIR_TEST_END_TIMEOUT_S, then ends the job.
scenario(rank_hangs Fixture.RankOneHangs 1 ENV HIR_TEST_END_TIMEOUT_S=2
  EXPECT "\\[hir\\] rank 0: ended Fixture.RankOneHangs, and not every rank ended it within 2 s of this one"
  REJECT "\\[hir\\] PASSED")
# A rank that leaves a test before a collective that the others wait in
# (a failed ASSERT): its failure is printed, then it ends the job, instead
# of meeting their collective in the next test.
scenario(rank_leaves_early Fixture.RankOneLeavesBeforeACollective:Fixture.AllgatherSeesEveryRank 1
  ENV HIR_TEST_END_TIMEOUT_S=2
  EXPECT "\\[rank 1\\] rank 1 leaves on purpose"
         "\\[hir\\] rank 1: ended Fixture.RankOneLeavesBeforeACollective, and not every rank ended it within 2 s"
  REJECT "\\[hir\\] PASSED" "MPI_ERR")

# Ranks that run different tests (here, different filters): the first test's
# end says so and ends the job.
execute_process(
  COMMAND ${MPIEXEC} -np 1 ${FIXTURE} --gtest_color=no --gtest_filter=Fixture.RunsWithExactlyTwoRanks
          : -np 1 ${FIXTURE} --gtest_color=no --gtest_filter=Fixture.FailsOnRankOne
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(got EQUAL 0 OR NOT "${out}\n${err}" MATCHES
   "ended test #1, Fixture\\.[A-Za-z]+, while rank [01] ended test #1, Fixture\\.[A-Za-z]+: the ranks do not run the same tests")
  message(SEND_ERROR "scenario different_tests: exit ${got}, expected an error naming both tests:\n${out}\n${err}")
else()
  message(STATUS "ok: different_tests")
endif()
