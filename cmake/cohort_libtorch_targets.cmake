# Note [Compiling against libtorch]
# Every target that includes libtorch (the library, the models, the examples, the benchmarks,
# the tests, the doc snippets) calls cohort_libtorch_target(), which makes two things cheap
# that each of its files would otherwise pay again (figures from the 2-core development machine,
# g++ 12, -O3; docs/install.md has the whole build's):
#
# 1. Parsing libtorch's headers. An empty file with <torch/torch.h> takes 12 s, the same file
#    with the header precompiled 3 s, and src/torch/ddp/ddp.cc 12 s against 6 s. One precompiled
#    <torch/torch.h> is built once (by cohort_torch_pch, about 25 s) and reused by every such
#    target (COHORT_PCH).
#    GCC uses a precompiled header only where it was built with the same -fPIC/-fPIE, the same
#    optimisation level and the same -Wpedantic (-Winvalid-pch warns otherwise, and the header
#    is then parsed as usual): every target that reuses it links cohort_warnings, and
#    executables compile with -fPIC instead of -fPIE (their code links into a
#    position-independent executable just the same).
# 2. What is left: loading the 570 MB header (about 3 s) and instantiating the same libtorch
#    templates in every file. Seven files of src/torch/compress/ take 40 s one by one and 9 s
#    as one translation unit, so the files of a target are compiled in unity batches of
#    COHORT_UNITY_BATCH files (COHORT_UNITY_BUILD; CMake's UNITY_BUILD). A change to one file recompiles its
#    batch, about 10-20 s. The files of a batch share one scope: names at file scope, also in
#    anonymous namespaces, must differ between the files of a target (a clash is a compile
#    error naming both places); test files keep their helpers in a namespace named after the
#    file instead of an anonymous one. A file that cannot share one sets
#    SKIP_UNITY_BUILD_INCLUSION; a target whose files are programs of their own is compiled
#    FILE_BY_FILE.
#
# COHORT_PCH=OFF for a compiler or tool that cannot read GCC's precompiled headers;
# COHORT_UNITY_BUILD=OFF to compile file by file (clang-tidy, or to find where a name clashes).
option(COHORT_PCH "Precompile libtorch's headers once for every target that includes them" ON)
option(COHORT_UNITY_BUILD "Compile the files of each libtorch target in unity batches" ON)
set(COHORT_UNITY_BATCH 8 CACHE STRING "Files per unity batch of the libtorch targets")

if(COHORT_PCH AND COHORT_WITH_TORCH)
  set(_pch_source ${PROJECT_BINARY_DIR}/cohort_torch_pch.cc)
  file(CONFIGURE OUTPUT ${_pch_source}
    CONTENT "// The translation unit that builds the precompiled libtorch (cmake/cohort_libtorch_targets.cmake).\n")
  add_library(cohort_torch_pch OBJECT ${_pch_source})
  target_link_libraries(cohort_torch_pch PRIVATE ${TORCH_LIBRARIES} cohort_warnings)
  set_target_properties(cohort_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_precompile_headers(cohort_torch_pch PRIVATE <torch/torch.h>)
endif()

# Note [Compiling against libtorch]: the precompiled libtorch and unity batches for `target`;
# cohort_libtorch_target(target FILE_BY_FILE) for a target whose files cannot share a scope.
function(cohort_libtorch_target target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "FILE_BY_FILE" "" "")
  if(COHORT_UNITY_BUILD AND NOT arg_FILE_BY_FILE)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
      UNITY_BUILD_BATCH_SIZE ${COHORT_UNITY_BATCH})
    # GCC takes a file included by the batch for a header, and warns of an anonymous-namespace
    # type in a class of that file as it would in a header: no harm in one translation unit.
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
  endif()
  if(NOT TARGET cohort_torch_pch)
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM cohort_torch_pch)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:cohort_warnings>)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
endfunction()
