# cmake --install: the public headers, one static library that bundles the
# project's own libraries (libtensorhub.a), a CMake package config and a
# pkg-config file. Third-party code is not bundled: libsodium (and
# libibverbs, CUDA's runtime where built) are the consumer's to link, and the
# config and the .pc file say so.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(tensorhub_bundled tensorhub_peer tensorhub_peer_core tensorhub_seams tensorhub_transport tensorhub_swarm tensorhub_gossip
    tensorhub_manifest tensorhub_core tensorhub_rdma tensorhub_cuda)
set(tensorhub_mri "create ${CMAKE_BINARY_DIR}/libtensorhub.a\n")
foreach(lib IN LISTS tensorhub_bundled)
  string(APPEND tensorhub_mri "addlib $<TARGET_FILE:${lib}>\n")
endforeach()
string(APPEND tensorhub_mri "save\nend\n")
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/libtensorhub.mri CONTENT "${tensorhub_mri}")
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/libtensorhub.a
  COMMAND ${CMAKE_COMMAND} -E rm -f ${CMAKE_BINARY_DIR}/libtensorhub.a
  COMMAND ${CMAKE_AR} -M < ${CMAKE_BINARY_DIR}/libtensorhub.mri
  DEPENDS ${tensorhub_bundled} ${CMAKE_BINARY_DIR}/libtensorhub.mri
  COMMENT "Bundling libtensorhub.a"
  VERBATIM)
add_custom_target(tensorhub_bundle ALL DEPENDS ${CMAKE_BINARY_DIR}/libtensorhub.a)

set(TENSORHUB_PC_REQUIRES "")
set(TENSORHUB_PC_LIBS "")
if(TENSORHUB_HAVE_RDMA)
  string(APPEND TENSORHUB_PC_REQUIRES " libibverbs")
endif()
if(TENSORHUB_HAVE_CUDA)
  string(APPEND TENSORHUB_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
# The .pc file finds the prefix from where it lies, so the install can move.
file(RELATIVE_PATH TENSORHUB_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
configure_file(${PROJECT_SOURCE_DIR}/cmake/tensorhub.pc.in ${CMAKE_BINARY_DIR}/tensorhub.pc @ONLY)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TensorHubConfig.cmake.in
  ${CMAKE_BINARY_DIR}/TensorHubConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/TensorHub
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TensorHubConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tensorhub DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_BINARY_DIR}/libtensorhub.a DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_BINARY_DIR}/TensorHubConfig.cmake ${CMAKE_BINARY_DIR}/TensorHubConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/TensorHub)
install(FILES ${CMAKE_BINARY_DIR}/tensorhub.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(TARGETS tensorhub RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
