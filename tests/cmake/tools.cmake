# Small programs the integration tests use.
add_executable(snapdiff ${CMAKE_CURRENT_SOURCE_DIR}/tools/snapdiff.c)
gptd_target(snapdiff)
target_link_libraries(snapdiff PRIVATE gptengine)
add_executable(tok_ids ${CMAKE_CURRENT_SOURCE_DIR}/tools/tok_ids.c)
gptd_target(tok_ids)
target_link_libraries(tok_ids PRIVATE gpttok)
