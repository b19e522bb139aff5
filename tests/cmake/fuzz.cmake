# libFuzzer targets (GPTD_FUZZ=ON, clang only, a separate build directory:
# see packaging/test.sh). Each tests/fuzz/fuzz_<name>.c is one target; ctest
# runs it over its committed corpus tests/fuzz/corpus/<name>/ and then
# fuzzes for a few seconds more. bench/fuzz.sh does the long runs.
if(NOT GPTD_FUZZ)
  return()
endif()
add_custom_target(fuzz_all)
file(GLOB GPTD_FUZZ_TARGETS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_*.c)
foreach(src ${GPTD_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" corpus ${name})
  add_executable(${name} ${src})
  add_dependencies(fuzz_all ${name})
  gptd_target(${name})
  target_compile_options(${name} PRIVATE -Wno-missing-prototypes -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE gptdaemon gptengine gptproto)
  if(name STREQUAL "fuzz_snapshot_file")
    # Its readers fill buffers sized from a header: AddressSanitizer's
    # read/pread/memcpy interceptors report a fill past one.
    target_compile_options(${name} PRIVATE -fsanitize=address)
    target_link_options(${name} PRIVATE -fsanitize=address)
  endif()
  set(dir ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${corpus})
  add_test(NAME ${name}_corpus COMMAND ${name} -runs=0 ${dir})
  # New inputs go to a scratch directory in the build tree (the first
  # directory libFuzzer is given), never into the committed corpus.
  set(scratch ${CMAKE_CURRENT_BINARY_DIR}/fuzz-scratch/${corpus})
  file(MAKE_DIRECTORY ${scratch})
  add_test(NAME ${name}_short COMMAND ${name} -max_total_time=10 -rss_limit_mb=2048 -timeout=5
                                       -artifact_prefix=${scratch}/ ${scratch} ${dir})
  set_tests_properties(${name}_corpus ${name}_short PROPERTIES LABELS fuzz TIMEOUT 120)
endforeach()
