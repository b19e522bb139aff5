# Small programs the integration tests use.
add_executable(snapdiff ${CMAKE_CURRENT_SOURCE_DIR}/tools/snapdiff.c)
gptd_target(snapdiff)
target_link_libraries(snapdiff PRIVATE gptengine gptproto)
