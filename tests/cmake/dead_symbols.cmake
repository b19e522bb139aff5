# The dead-symbol gate: a public function of a production library that no
# production code calls fails the suite (tests/tools/dead_symbols.py says
# how "public" and "called" are decided; dead_symbols.allow lists the
# functions only tests call today). Its self-test plants one in a scratch
# library and must catch it.
add_test(NAME dead_symbols COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/dead_symbols.py
                                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(dead_symbols PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
