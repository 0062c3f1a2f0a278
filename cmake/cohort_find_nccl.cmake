# Finds NCCL (libnccl and nccl.h) for the NCCL backend and defines the imported target
# NCCL::nccl. Used by cohort's own build and, installed beside cohortConfig.cmake, by
# find_package(cohort COMPONENTS nccl) on the user's machine: the library is searched where that
# machine has it, never taken from the path it had where cohort was built.
#
# Looks in NCCL_ROOT (variable or environment), the CUDA toolkit's directories when
# find_package(CUDAToolkit) ran first, then the usual prefixes and /usr/local/cuda.
# Sets NCCL_FOUND, and the cache entries NCCL_LIBRARY and NCCL_INCLUDE_DIR (set them to choose).
set(_cohort_nccl_hints)
foreach(_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}")
  if(_root)
    list(APPEND _cohort_nccl_hints "${_root}")
  endif()
endforeach()
if(CUDAToolkit_FOUND)
  list(APPEND _cohort_nccl_hints "${CUDAToolkit_LIBRARY_ROOT}")
  get_filename_component(_cuda_prefix "${CUDAToolkit_LIBRARY_DIR}" DIRECTORY)
  list(APPEND _cohort_nccl_hints "${_cuda_prefix}")
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_cohort_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include PATHS /usr/local/cuda)
find_library(NCCL_LIBRARY nccl HINTS ${_cohort_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib PATHS /usr/local/cuda)
set(NCCL_FOUND FALSE)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(NCCL_FOUND TRUE)
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()
unset(_cohort_nccl_hints)
unset(_cuda_prefix)
unset(_root)
