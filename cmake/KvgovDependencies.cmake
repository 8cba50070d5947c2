# Third-party packages, all from Debian (scripts/install-deps.sh installs
# them). Each is linked PRIVATE by the one module that needs it.

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(CLI11 REQUIRED)
# Debian ships cpp-httplib prebuilt; its pkg-config flags carry the defines
# the .so was built with, so they must be used or the class layout differs.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

if(KVGOV_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KVGOV_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
