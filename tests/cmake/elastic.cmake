# Elastic multi-node tests: whole clusters of gptd processes on loopback
# (elastic_partition: in network namespaces; skipped, exit 77, without
# them). Each starts its own nodes, state directories and sockets, and
# kills everything it started on exit. elastic_chaos is also labelled slow
# but fits the default suite (about a minute on two cores). elastic_member
# covers the embedded default (a gptd without an endpoint), what a member's
# gptctl shows, and leaves that use up no restart. elastic_multi: several
# jobs at once on disjoint nodes, the queue's order and reasons.
# elastic_stop_order: the whole cluster stopped at once, a member first, as
# `scontrol requeue` does: the job stops at the leave's snapshot.
# elastic_node_id: a node id another live node holds is refused at join.
set(GPTD_ELASTIC_TESTS elastic_kill elastic_coord elastic_min elastic_partition elastic_chaos
    elastic_shard elastic_member elastic_owner elastic_batch elastic_multi elastic_stop_order
    elastic_node_id)
set(GPTD_ELASTIC_TIMEOUT_elastic_stop_order 120)
set(GPTD_ELASTIC_TIMEOUT_elastic_shard 240)
set(GPTD_ELASTIC_TIMEOUT_elastic_kill 150)
set(GPTD_ELASTIC_TIMEOUT_elastic_batch 120)
set(GPTD_ELASTIC_TIMEOUT_elastic_coord 150)
set(GPTD_ELASTIC_TIMEOUT_elastic_min 120)
set(GPTD_ELASTIC_TIMEOUT_elastic_owner 120)
set(GPTD_ELASTIC_TIMEOUT_elastic_member 180)
set(GPTD_ELASTIC_TIMEOUT_elastic_partition 180)
set(GPTD_ELASTIC_TIMEOUT_elastic_chaos 360)
set(GPTD_ELASTIC_TIMEOUT_elastic_multi 120)
set(GPTD_ELASTIC_TIMEOUT_elastic_node_id 180)
foreach(t ${GPTD_ELASTIC_TESTS})
  add_test(NAME ${t}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh $<TARGET_FILE:gptd>
                   $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
  set(labels integration)
  if(t STREQUAL "elastic_chaos")
    set(labels integration slow)
  endif()
  set_tests_properties(${t} PROPERTIES LABELS "${labels}" TIMEOUT ${GPTD_ELASTIC_TIMEOUT_${t}}
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
# elastic_records: global rank 0 on a member; the coordinator holds its
# final metric, snapshot row and done event before the job completes; the
# member killed right after renaming its final snapshot into place
# (tests/tools/rename_kill, an LD_PRELOAD library) fails the job saying
# which records are lost and where the snapshot is.
add_library(rename_kill SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tools/rename_kill.c)
target_compile_options(rename_kill PRIVATE -Wall -Wextra -Werror)
target_link_libraries(rename_kill PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME elastic_records
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_records.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:rename_kill>)
set_tests_properties(elastic_records PROPERTIES LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# 256 member clusters and a coordinator in one process (tests/unit, built
# like the unit tests): the control plane's watch, heartbeat table and
# rounds at a size, in well under 30 s.
set_tests_properties(test_cluster_256 PROPERTIES LABELS integration TIMEOUT 120)
# elastic_clock: CLOCK_REALTIME stepped back and forward (an LD_PRELOAD
# shim, tests/tools/realtime_shift.c) under a job of two nodes: no timeout
# fires, since every one runs on the monotonic clock.
add_library(realtime_shift SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tools/realtime_shift.c)
target_compile_options(realtime_shift PRIVATE -Wall -Wextra -Werror)
add_test(NAME elastic_clock
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_clock.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:realtime_shift>)
set_tests_properties(elastic_clock PROPERTIES LABELS integration TIMEOUT 300 RUN_SERIAL TRUE
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# elastic_liar: a member holding the cluster secret that lies (forged
# records, heartbeats, worker and round keys) through itest_store, a store
# client that names the node it speaks for: every forgery is refused and
# counted, and the honest job completes with its own records only.
add_executable(itest_store ${CMAKE_CURRENT_SOURCE_DIR}/integration/itest_store.c)
gptd_target(itest_store)
target_link_libraries(itest_store PRIVATE gptstore)
add_test(NAME elastic_liar
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_liar.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(elastic_liar PROPERTIES LABELS integration TIMEOUT 240 RUN_SERIAL TRUE
                     ENVIRONMENT
                     "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;ITEST_STORE=$<TARGET_FILE:itest_store>")
# elastic_quarantine: a member whose ranks cannot start on what it claimed
# (more workers than its GPUs, stood in by GPTD_TEST_GPU_COUNT) is
# quarantined; the jobs form again on honest nodes without spending a
# restart, and a job waiting meanwhile says so.
add_test(NAME elastic_quarantine
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_quarantine.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(elastic_quarantine PROPERTIES LABELS integration TIMEOUT 300 RUN_SERIAL TRUE
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
