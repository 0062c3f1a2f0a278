# Note [One process per suite]: the test binaries that load libtorch take about 0.9 s to start
# on the 2-core machine before their first test runs, so that one CTest entry per test
# (gtest_discover_tests) spent about 470 of the torch label's 640 s starting processes. Their
# tests are registered one CTest entry per gtest suite instead (`--gtest_filter=Suite.*`; a
# parameterized suite is its instantiation, "Strategies/FsdpParity"): the suites still run in
# parallel, and each process runs its suite's tests one after another. A suite whose every test
# skipped itself exits with 77 (support/gtest_main.cc, COHORT_GTEST_ALL_SKIPPED_EXIT), which
# CTest reports as skipped; a suite where some tests ran and others skipped passes, with the
# skips and their reasons in its output.
#
#   cohort_discover_test_suites(TARGET LABEL label [TIMEOUT s])
#
# Like gtest_discover_tests, the suites are listed after each build of TARGET (its
# --gtest_list_tests) into a file that CTest includes when it runs.
function(cohort_discover_test_suites target)
  cmake_parse_arguments(arg "" "LABEL;TIMEOUT" "" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 900)
  endif()
  set(ctest_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>"
      -D "CTEST_FILE=${ctest_file}" -D "LABEL=${arg_LABEL}" -D "TIMEOUT=${arg_TIMEOUT}"
      -P ${PROJECT_SOURCE_DIR}/cmake/cohort_gtest_suites_list.cmake
    BYPRODUCTS ${ctest_file}
    VERBATIM)
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${ctest_file})
endfunction()
