# Run after a build of a test binary (cohort_gtest_suites.cmake, Note [One process per suite]):
# writes CTEST_FILE with one CTest entry per gtest suite of TEST_EXECUTABLE.
# In: TEST_EXECUTABLE, CTEST_FILE, LABEL, TIMEOUT.
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE result TIMEOUT 60)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${result}): ${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "# Written by cmake/cohort_gtest_suites_list.cmake from ${TEST_EXECUTABLE}\n")
foreach(line IN LISTS lines)
  # A suite's line: "Suite." or "Prefix/Suite.  # TypeParam = ..."; its tests are indented.
  if(line MATCHES "^([^ ]+)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND content
      "add_test([=[${suite}]=] [=[${TEST_EXECUTABLE}]=] [=[--gtest_filter=${suite}.*]=])\n"
      "set_tests_properties([=[${suite}]=] PROPERTIES LABELS [=[${LABEL}]=] TIMEOUT ${TIMEOUT}"
      " SKIP_RETURN_CODE 77 ENVIRONMENT COHORT_GTEST_ALL_SKIPPED_EXIT=77)\n")
  endif()
endforeach()
file(WRITE "${CTEST_FILE}" "${content}")
