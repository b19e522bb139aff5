# Issue 14's "no fault hangs gptd" and "resource limits before allocation":
# stop signals in any mix, idle and greedy clients, limits checked at submit.
set(GPTD_LIMITS_TESTS daemon_signals)
foreach(t ${GPTD_LIMITS_TESTS})
  add_test(NAME ${t}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh $<TARGET_FILE:gptd>
                   $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
  set_tests_properties(${t} PROPERTIES LABELS integration TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
