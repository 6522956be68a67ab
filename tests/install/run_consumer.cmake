# Installs hostir into a scratch prefix, then configures, builds and runs an
# out-of-tree project that uses find_package(hostir) and hostir::hostir.
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
