# Model formats out and in (engine/fmt: llm.c, GGUF) through the test
# driver tests/tools/fmt_convert, until `gptd export` dispatches to them.
add_test(NAME fmt_llmc COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/fmt_llmc.sh
                               $<TARGET_FILE:fmt_convert>)
set_tests_properties(fmt_llmc PROPERTIES LABELS integration TIMEOUT 120)
