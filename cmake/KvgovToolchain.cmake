# Compiler cache, linker and warning flags shared by every kvgov target.

find_program(KVGOV_CCACHE ccache)
if(KVGOV_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER "${KVGOV_CCACHE}")
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
endif()
