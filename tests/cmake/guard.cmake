# Layering guard: no layer includes a header of a layer above it (nothing
# under engine/ or proto/ sees uv.h, sqlite3.h or a daemon/ header; the
# engine sees no proto/ header), and gptengine links neither gptproto nor
# jansson (its CMake line, and the link command of test_engine_alone below).
add_test(NAME layering_guard COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/layering_guard.sh
                                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(layering_guard PROPERTIES LABELS unit TIMEOUT 30)

# The engine stands alone: a program linked with gptengine only (no gptproto,
# no jansson) builds a job by hand and trains it (tests/standalone).
add_executable(test_engine_alone ${CMAKE_CURRENT_SOURCE_DIR}/standalone/test_engine_alone.c)
gptd_target(test_engine_alone)
target_compile_options(test_engine_alone PRIVATE -Wno-missing-prototypes)
target_include_directories(test_engine_alone PRIVATE ${CMOCKA_INCLUDE_DIR})
target_link_libraries(test_engine_alone PRIVATE gptengine ${CMOCKA_LIBRARIES})
add_test(NAME test_engine_alone COMMAND test_engine_alone)
set_tests_properties(test_engine_alone PROPERTIES LABELS unit TIMEOUT 60
                     ENVIRONMENT "OMP_NUM_THREADS=1")

# The map stays true to the tree: every daemon/ and engine/ source named in
# a module table of docs/architecture.md, every gptctl command in gptctl(1)
# and the bash completion (with a self-test that plants one of each).
add_test(NAME doc_lint COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/doc_lint.sh
                               ${CMAKE_SOURCE_DIR} $<TARGET_FILE:gptctl>)
set_tests_properties(doc_lint PROPERTIES LABELS unit TIMEOUT 30)

# No circles: no include circle between modules, no call circle between
# .c files of daemon/ or ctl/ (from the objects' symbols) but the ones
# tests/tools/arch_stats.py still lists as known, no arrow between daemon
# folders that layering_guard's list does not hold, no folder with more
# than 30 sources directly.
add_test(NAME daemon_circles COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/arch_stats.py
                                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} --check)
set_tests_properties(daemon_circles PROPERTIES LABELS unit TIMEOUT 60)
