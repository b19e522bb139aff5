# Issue 14's "no fault hangs gptd" and "resource limits before allocation":
# stop signals in any mix, idle and greedy clients, limits checked at submit.
set(GPTD_LIMITS_TESTS daemon_signals daemon_limits daemon_batch)
foreach(t ${GPTD_LIMITS_TESTS})
  add_test(NAME ${t}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh $<TARGET_FILE:gptd>
                   $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
  set_tests_properties(${t} PROPERTIES LABELS integration TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()

add_executable(itest_conns ${CMAKE_CURRENT_SOURCE_DIR}/integration/itest_conns.c)
gptd_target(itest_conns)
add_test(NAME daemon_clients
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/daemon_clients.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:itest_conns>)
set_tests_properties(daemon_clients PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# Issue 36's user work: sample, export and --resume-from copies bounded per
# user, cancelled with their client and at a stop (a test user; root).
add_test(NAME daemon_userwork
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/daemon_userwork.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(daemon_userwork PROPERTIES LABELS integration TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
