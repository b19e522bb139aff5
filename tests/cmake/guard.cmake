# Layering guard: nothing under engine/ or proto/ may include uv.h,
# sqlite3.h or a daemon/ header.
add_test(NAME layering_guard COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/layering_guard.sh
                                     ${CMAKE_SOURCE_DIR})
set_tests_properties(layering_guard PROPERTIES LABELS unit TIMEOUT 30)
