# cmake --install the build into a fresh prefix, then build and run a consumer that uses
# find_package(nsajit) with both the shared and the static library.
# Then builds examples/cpp_decode_step against it the same way and runs it.
# In: BUILD_DIR, SOURCE_DIR, WORK_DIR, CUDA_ROOT.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
run_step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run_step(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/package_consumer" -B "${WORK_DIR}/build"
         "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
foreach(app app app_static)
  execute_process(COMMAND "${WORK_DIR}/build/${app}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${app} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${app}: ${out}")
endforeach()

run_step(${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/cpp_decode_step" -B "${WORK_DIR}/example"
         "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DCUDAToolkit_ROOT=${CUDA_ROOT}" -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/example")
execute_process(COMMAND "${WORK_DIR}/example/cpp_decode_step" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cpp_decode_step failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "cpp_decode_step: ${out}")

# --precompile puts the step's kernels into the cache, and exits 1 when an entry cannot be written.
execute_process(COMMAND ${CMAKE_COMMAND} -E env "NSAJIT_CACHE_DIR=${WORK_DIR}/example-cache"
                        "${WORK_DIR}/example/cpp_decode_step" --precompile
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCHALL "precompiled [^\n]*" lines "${out}")
list(LENGTH lines n)
if(NOT rc EQUAL 0 OR NOT n EQUAL 4 OR out MATCHES "could not be written")
  message(FATAL_ERROR "cpp_decode_step --precompile: exit ${rc}, ${n} kernels:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env "NSAJIT_CACHE_DIR=/proc/nsajit-no-cache"
                        "${WORK_DIR}/example/cpp_decode_step" --precompile
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT out MATCHES "its cache entry could not be written")
  message(FATAL_ERROR "cpp_decode_step --precompile into an unwritable cache: exit ${rc}, expected 1:\n${out}\n${err}")
endif()
