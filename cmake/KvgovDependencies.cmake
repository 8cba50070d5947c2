# Third-party packages, all from Debian (scripts/install-deps.sh installs
# them). Each is linked PRIVATE by the one module that needs it.

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
# simdjson::simdjson: the gateway's request-body parser (ADR 0016).
find_package(simdjson CONFIG REQUIRED)
find_package(CLI11 REQUIRED)
# msgpack-cxx is header-only; target msgpackc-cxx. Found here, at the top,
# because imported targets are directory-scoped and both the adapters and
# the ingest tests use it. (libmsgpack-dev would shadow this config:
# scripts/install-deps.sh refuses to run beside it.)
find_package(msgpack CONFIG REQUIRED)
find_package(cppzmq REQUIRED)
# Debian ships cpp-httplib prebuilt; its pkg-config flags carry the defines
# the .so was built with, so they must be used or the class layout differs.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
# Boost.Beast and Asio (header-only, from libboost1.74-dev) and OpenSSL:
# the gateway's event-driven front door (ADR 0034).
find_package(Boost 1.74 REQUIRED)
find_package(OpenSSL REQUIRED)
# RocksDB::rocksdb (static), linked by kvgov_store only. Its config appends
# its own Find modules to CMAKE_MODULE_PATH: find TBB with CONFIG if ever needed.
find_package(RocksDB REQUIRED)
# libsodium ships no CMake config (Ed25519 signing of certificates).
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
# hiredis 0.14 (Debian's libhiredis-dev) ships no CMake config either; only
# kvgov_replication links it.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)

if(KVGOV_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KVGOV_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
