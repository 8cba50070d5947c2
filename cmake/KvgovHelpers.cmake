# kvgov_add_library(NAME SRCS ... [DEPS ...] [PRIVATE_DEPS ...])
#   A static library. DEPS are public (part of the layering contract: review
#   them as architecture); PRIVATE_DEPS are implementation details, and no
#   third-party type they bring may appear in include/kvgov.
function(kvgov_add_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  # BUILD_INTERFACE: an installed library (cmake/KvgovInstall.cmake) finds
  # its headers under the install prefix and carries no warning flags.
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                     PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS}
                                PRIVATE $<BUILD_INTERFACE:kvgov_warnings> ${ARG_PRIVATE_DEPS})
endfunction()

# kvgov_add_test(NAME SRCS ... [DEPS ...] [LABELS ...])
#   One gtest binary, its tests discovered into ctest with the given labels.
function(kvgov_add_test name)
  if(NOT KVGOV_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE kvgov_warnings ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()

# kvgov_add_bench(NAME SRCS ... [DEPS ...])
function(kvgov_add_bench name)
  if(NOT KVGOV_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE kvgov_warnings ${ARG_DEPS} benchmark::benchmark_main)
endfunction()

# kvgov_add_fuzzer(NAME [DEPS ...])
#   One libFuzzer target from fuzz/NAME.cc, linked with libFuzzer's main; its
#   seed corpus is fuzz/corpus/NAME. Also a dependency of `kvgov_fuzzers`,
#   which builds every fuzzer and nothing else of the tree.
function(kvgov_add_fuzzer name)
  if(NOT KVGOV_BUILD_FUZZERS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  add_executable(${name} ${name}.cc)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE kvgov_warnings ${ARG_DEPS})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  add_dependencies(kvgov_fuzzers ${name})
endfunction()
