# cohort as an installable package (docs/install.md): pkg-config files for builds without CMake,
# and `cpack` (from the build folder) makes a Debian package of everything `cmake --install`
# installs: the libraries, headers, CMake config, pkg-config files, cohortrun, cohort-bench, the
# examples and the docs. Included by the top-level CMakeLists.txt after every target exists.

# ---- pkg-config: cohort-comm (no libtorch) and, with the libtorch layer, cohort.
# The prefix is found from the .pc file's own place (${pcfiledir}, which pkg-config and pkgconf
# both know), so that a tree unpacked or installed anywhere works as it is: --define-prefix
# would relocate Open MPI's and zlib's .pc files too.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(COHORT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _pc_up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" _pc_up "${_pc_up}")
  set(COHORT_PC_PREFIX "\${pcfiledir}/${_pc_up}")
endif()
set(_pc_comm_requires "")
if(COHORT_WITH_MPI)
  list(APPEND _pc_comm_requires "mpi-cxx")  # cohort_comm links MPI (Open MPI's mpi-cxx.pc)
endif()
if(COHORT_WITH_ETCD)
  list(APPEND _pc_comm_requires "libcurl")  # and libcurl, for the etcd store
endif()
list(JOIN _pc_comm_requires ", " COHORT_PC_COMM_REQUIRES)
set(_pc_files cohort-comm)
if(COHORT_WITH_TORCH)
  # libtorch ships no pkg-config file: its include folders and libraries are written here.
  # torch_cpu registers the operators and must be linked even though nothing names it.
  set(COHORT_PC_TORCH_CFLAGS "${TORCH_CXX_FLAGS}")
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    if(NOT dir STREQUAL "/usr/include")
      string(APPEND COHORT_PC_TORCH_CFLAGS " -I${dir}")
    endif()
  endforeach()
  get_filename_component(_torch_libdir "${TORCH_LIBRARY}" DIRECTORY)
  set(COHORT_PC_TORCH_LIBS
    "-L${_torch_libdir} -Wl,--no-as-needed -ltorch -ltorch_cpu -Wl,--as-needed -lc10")
  list(APPEND _pc_files cohort)
endif()
foreach(pc IN LISTS _pc_files)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/pkgconfig/${pc}.pc.in
    ${PROJECT_BINARY_DIR}/pkgconfig/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/${pc}.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# ---- the docs, beside the package's copyright notice
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ---- the Debian package: cohort_<version>_<arch>.deb. Not inside a user's project, whose
# own CPack settings are its own.
if(NOT _cohort_is_top_level)
  return()
endif()
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "cohort")
set(CPACK_PACKAGE_VENDOR "cohort")
set(CPACK_PACKAGE_CONTACT "cohort developers <cohort@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "data-parallel training for libtorch: DDP, ZeRO, FSDP, collectives, launcher")
set(CPACK_PACKAGE_INSTALL_DIRECTORY "cohort")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "libdevel")
# The shared libraries the programs load (libtorch, Open MPI, ...) are found by dpkg-shlibdeps;
# the headers and static libraries need the -dev packages that find_package(cohort) and the
# pkg-config files look for.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(_deb_depends "zlib1g-dev")
if(COHORT_WITH_TORCH)
  list(APPEND _deb_depends "libtorch-dev")
endif()
if(COHORT_WITH_MPI)
  list(APPEND _deb_depends "libopenmpi-dev")
endif()
if(COHORT_WITH_ETCD)
  list(APPEND _deb_depends "libcurl4-openssl-dev")
endif()
list(JOIN _deb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
# What the examples read, and the build tools of a consumer: wanted, not needed.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "cmake, pkg-config, dataset-fashion-mnist, fortunes")
set(CPACK_PACKAGE_DESCRIPTION "cohort brings PyTorch's data-parallel stack to the C++ API:
collectives over shared memory, TCP and MPI, DistributedDataParallel, ZeRO stages 1-3 and FSDP,
mixed precision with loss scaling, gradient compression, local SGD, parameter servers and the
cohortrun launcher.")
include(CPack)
