# Note [Precompiled libtorch]
# Parsing libtorch's headers is most of the cost of every translation unit that includes them:
# on the 2-core development machine (g++ 12, -O3) an empty file with <torch/torch.h> takes 12 s,
# the same file with the header precompiled 3 s, and src/torch/ddp.cc 12 s against 6 s. So one
# precompiled <torch/torch.h> is built once (by cohort_torch_pch, about 25 s) and every target
# that includes libtorch reuses it: the library, the models, the examples, the benchmarks, the
# tests and the doc snippets.
#
# GCC uses a precompiled header only where it was built with the same -fPIC/-fPIE, the same
# optimisation level and the same -Wpedantic (-Winvalid-pch warns otherwise, and the header is
# then parsed as usual): every target that reuses it links cohort_warnings. The header is built
# with -fPIC, so executables that reuse it compile with -fPIC instead of -fPIE (their code links
# into a position-independent executable just the same).
#
# COHORT_PCH=OFF turns it off (for a compiler or a tool that cannot read GCC's headers).
option(COHORT_PCH "Precompile libtorch's headers once for every target that includes them" ON)

if(COHORT_PCH AND COHORT_WITH_TORCH)
  set(_pch_source ${PROJECT_BINARY_DIR}/cohort_torch_pch.cc)
  file(CONFIGURE OUTPUT ${_pch_source}
    CONTENT "// The translation unit that builds the precompiled libtorch (cmake/cohort_torch_pch.cmake).\n")
  add_library(cohort_torch_pch OBJECT ${_pch_source})
  # With the warning flags of every other target: -Wpedantic changes which feature macros
  # are defined, and GCC refuses a header built under other macros.
  target_link_libraries(cohort_torch_pch PRIVATE ${TORCH_LIBRARIES} cohort_warnings)
  set_target_properties(cohort_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_precompile_headers(cohort_torch_pch PRIVATE <torch/torch.h>)
endif()

# Makes `target` reuse the precompiled libtorch (Note [Precompiled libtorch]); does nothing
# where COHORT_PCH is off.
function(cohort_use_torch_pch target)
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
