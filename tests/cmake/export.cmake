# Models out and in (engine/fmt, gptd/gptctl export, model.init_from).
add_test(NAME export_hf
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/export_hf.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:logits>)
set_tests_properties(export_hf PROPERTIES LABELS "integration;reference" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")

# Exports honour the client's umask and leave no temporary behind, also
# when gptd is killed while writing one (issue 36, cases 9 and 11).
add_test(NAME export_private
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/export_private.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:rename_kill>)
set_tests_properties(export_private PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
