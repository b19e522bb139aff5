# A cluster always has a secret (issue 14): generated secrets, short ones
# refused, members without it refused, `gptd run` across processes unchanged.
add_test(NAME store_secret
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/store_secret.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> ${CMAKE_CURRENT_SOURCE_DIR}/integration/jobs/tiny_adder.json)
set_tests_properties(store_secret PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1")
