# Compiler cache, linker and warning flags shared by every kvgov target.

find_program(KVGOV_CCACHE ccache)
if(KVGOV_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  # Paths under the source tree are hashed relative to it (and the working
  # directory not at all), so a fresh clone elsewhere, as CI makes, reuses
  # what this machine compiled before.
  set(CMAKE_CXX_COMPILER_LAUNCHER
      "${CMAKE_COMMAND};-E;env;CCACHE_BASEDIR=${CMAKE_SOURCE_DIR};CCACHE_NOHASHDIR=1;${KVGOV_CCACHE}")
endif()

find_program(KVGOV_MOLD mold)
if(KVGOV_MOLD)
  add_link_options(-fuse-ld=mold)
endif()

add_library(kvgov_warnings INTERFACE)
target_compile_options(kvgov_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                                                -Wnon-virtual-dtor)
# GCC 12 reports false -Wrestrict positives inside libstdc++'s std::string at
# -O3 (GCC bug 105651); the warning says nothing about our code there.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(kvgov_warnings INTERFACE -Wno-restrict)
endif()
if(KVGOV_WERROR)
  target_compile_options(kvgov_warnings INTERFACE -Werror)
endif()

if(KVGOV_SANITIZE)
  add_compile_options(-fsanitize=${KVGOV_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${KVGOV_SANITIZE})
  # The sanitizers' instrumentation makes GCC's flow analysis report
  # uninitialized reads inside libstdc++ (std::function within <regex>)
  # that the uninstrumented build does not: kept as a warning there, not
  # an error. The Release build keeps -Werror for it on our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(kvgov_warnings INTERFACE -Wno-error=maybe-uninitialized)
  endif()
endif()

# A fuzz tree instruments every kvgov library for libFuzzer's coverage
# feedback and for ASan/UBSan, so a bug deep in a decoder is both found and
# reported where it happens. Only the fuzz/ executables link libFuzzer
# itself (kvgov_add_fuzzer); anything else built here gets the sanitizer
# runtimes only. UBSan must not recover: a report that merely prints would
# never reach libFuzzer as a crash.
if(KVGOV_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KVGOV_BUILD_FUZZERS needs clang for libFuzzer; configure a separate "
                        "tree with -DCMAKE_CXX_COMPILER=clang++ (see `make fuzz`)")
  endif()
  if(KVGOV_SANITIZE)
    message(FATAL_ERROR "KVGOV_BUILD_FUZZERS sets its own sanitizers; leave KVGOV_SANITIZE empty")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
