# Install rules and the CMake config package: find_package(safeamp CONFIG REQUIRED COMPONENTS sim cuda).
include(CMakePackageConfigHelpers)
set(SAFEAMP_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/safeamp)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/safeamp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS safeamp EXPORT safeamp-targets)
install(EXPORT safeamp-targets NAMESPACE safeamp:: DESTINATION ${SAFEAMP_CONFIG_DIR})

if(SAFEAMP_HAVE_SIM)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/sim/include/safeamp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(TARGETS safeamp_sim safeamp_format_kernels EXPORT safeamp-sim-targets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT safeamp-sim-targets NAMESPACE safeamp:: DESTINATION ${SAFEAMP_CONFIG_DIR})
endif()
if(SAFEAMP_HAVE_CUDA)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/cuda/include/safeamp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(TARGETS safeamp_cuda EXPORT safeamp-cuda-targets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT safeamp-cuda-targets NAMESPACE safeamp:: DESTINATION ${SAFEAMP_CONFIG_DIR})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/safeamp-config.cmake.in
  ${PROJECT_BINARY_DIR}/safeamp-config.cmake INSTALL_DESTINATION ${SAFEAMP_CONFIG_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/safeamp-config-version.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/safeamp-config.cmake ${PROJECT_BINARY_DIR}/safeamp-config-version.cmake
  DESTINATION ${SAFEAMP_CONFIG_DIR})
