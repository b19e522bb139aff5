# bench/torch_gpt2.py (the GPU benchmark's PyTorch side) against gptd on a
# CPU: the same first-step loss from the same weights and tokens.
add_test(NAME torch_gpt2_equal
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/torch_gpt2_equal.sh $<TARGET_FILE:gptd>
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(torch_gpt2_equal PROPERTIES LABELS "integration;reference" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")
