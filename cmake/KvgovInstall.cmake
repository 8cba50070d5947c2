# `cmake --install` rules. Component `sdk`: the public headers of core and
# client, their static libraries and the CMake package `kvgov`
# (lib/cmake/kvgov); component `daemon`: the kvgov binary. Only what the SDK
# needs is installed: the other modules' headers name internal types and
# third-party-backed libraries a bridge never links.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVGOV_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvgov)

# kvgov_core is defined in src/core; its install identity is set here, with
# the rest of the package.
set_target_properties(kvgov_core PROPERTIES EXPORT_NAME core POSITION_INDEPENDENT_CODE ON)

install(TARGETS kvgov_core kvgov_client
        EXPORT kvgov-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT sdk
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvgov/core ${PROJECT_SOURCE_DIR}/include/kvgov/client
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvgov
        COMPONENT sdk
        FILES_MATCHING PATTERN "*.h")
install(EXPORT kvgov-targets
        NAMESPACE kvgov::
        FILE kvgov-targets.cmake
        DESTINATION ${KVGOV_INSTALL_CMAKEDIR}
        COMPONENT sdk)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kvgov-config.cmake.in
                              ${PROJECT_BINARY_DIR}/kvgov-config.cmake
                              INSTALL_DESTINATION ${KVGOV_INSTALL_CMAKEDIR})
# 0.x: a minor release may break the API, so only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvgov-config-version.cmake
                                 VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvgov-config.cmake
              ${PROJECT_BINARY_DIR}/kvgov-config-version.cmake
        DESTINATION ${KVGOV_INSTALL_CMAKEDIR}
        COMPONENT sdk)

install(TARGETS kvgov RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT daemon)
