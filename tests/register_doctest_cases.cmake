# register_doctest_cases.cmake — writes one ctest entry per doctest case of TEST_EXECUTABLE into
# CTEST_FILE (run after each build). Unlike doctest_discover_tests, a name holding ';' or ','
# stays one entry: it never becomes a CMake list, is written as a bracket argument, and its
# doctest filter escapes ',' and '\'. Each entry passes --expect-cases=1, so an entry whose filter
# matches no case, or more than one, fails instead of passing empty.
execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-cases --no-intro=true
                OUTPUT_VARIABLE output RESULT_VARIABLE result WORKING_DIRECTORY "${WORKING_DIR}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --list-test-cases failed (${result}):\n${output}")
endif()

# Keep ';' out of list operations: placeholder while splitting lines, restored when writing.
string(REPLACE ";" "@NSAJIT_SEMICOLON@" output "${output}")
string(REPLACE "\n" ";" lines "${output}")

# A bracket argument [==[...]==] whose level no text in the entry can close early.
function(bracket text out)
  set(eq "=")
  while(text MATCHES "]${eq}]")
    string(APPEND eq "=")
  endwhile()
  set(${out} "[${eq}[${text}]${eq}]" PARENT_SCOPE)
endfunction()

set(script "")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "" OR line MATCHES "^=+$" OR line MATCHES "^\\[doctest\\] ")
    continue()
  endif()
  string(REPLACE "@NSAJIT_SEMICOLON@" ";" name "${line}")
  string(REPLACE "\\" "\\\\" filter "${name}")
  string(REPLACE "," "\\," filter "${filter}")
  bracket("${name}" name_arg)
  bracket("--test-case=${filter}" filter_arg)
  bracket("${TEST_EXECUTABLE}" exe_arg)
  bracket("${WORKING_DIR}" dir_arg)
  string(APPEND script "add_test(${name_arg} ${exe_arg} ${filter_arg} --expect-cases=1)\n")
  string(APPEND script "set_tests_properties(${name_arg} PROPERTIES WORKING_DIRECTORY ${dir_arg} LABELS doctest_case)\n")
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} listed no test cases:\n${output}")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
