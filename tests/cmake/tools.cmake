# Small programs the integration tests use.
add_executable(snapdiff ${CMAKE_CURRENT_SOURCE_DIR}/tools/snapdiff.c)
gptd_target(snapdiff)
target_link_libraries(snapdiff PRIVATE gptengine)
add_executable(tok_ids ${CMAKE_CURRENT_SOURCE_DIR}/tools/tok_ids.c)
gptd_target(tok_ids)
target_link_libraries(tok_ids PRIVATE gpttok)
add_executable(logits ${CMAKE_CURRENT_SOURCE_DIR}/tools/logits.c)
gptd_target(logits)
target_link_libraries(logits PRIVATE gptfactory gptengine gptproto)
add_executable(fmt_convert ${CMAKE_CURRENT_SOURCE_DIR}/tools/fmt_convert.c)
gptd_target(fmt_convert)
target_link_libraries(fmt_convert PRIVATE gptfmt)
# No production function over 150 lines (CUDA kernels aside): the gate
# names each one; its self-test plants a 151-line function and must
# catch it (and pass one of 150). `func_length.py SOURCE_DIR` lists them.
add_test(NAME function_length COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/func_length.py
                                      ${CMAKE_SOURCE_DIR} --check 150)
add_test(NAME function_length_selftest COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/func_length.py
                                               --self-test)
set_tests_properties(function_length function_length_selftest PROPERTIES LABELS unit TIMEOUT 60)
