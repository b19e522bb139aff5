# Issue 19's "fail fast where retrying cannot help": one test per class of
# failure with real daemons. daemon_fail_fast: spec, data and snapshot or
# model mismatch fail at once (restarts 0); daemon_fail_perm: a job owned
# by a test user whose data or snapshot folder it may not open fails at
# once; elastic_fail_retry: a node killed is retried and counts a restart,
# while a data error of a two-node world still fails at once.
foreach(t daemon_fail_fast daemon_fail_perm elastic_fail_retry)
  add_test(NAME ${t}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh $<TARGET_FILE:gptd>
                   $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
  set_tests_properties(${t} PROPERTIES LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
set_tests_properties(elastic_fail_retry PROPERTIES RUN_SERIAL TRUE)
