# The daemon's integration tests: bash scripts that start real gptd
# processes (each with its own temporary state directory and socket) and
# drive them with gptctl and tests/integration/itest_client.
add_executable(itest_client ${CMAKE_CURRENT_SOURCE_DIR}/integration/itest_client.c)
gptd_target(itest_client)
target_link_libraries(itest_client PRIVATE SQLite::SQLite3)

set(GPTD_DAEMON_TESTS daemon_flow daemon_restart daemon_malformed daemon_follower
                      daemon_config daemon_paths daemon_resume daemon_statedir
                      daemon_snapshot_owner daemon_identity daemon_resume_extend
                      daemon_compose_sweep daemon_resume_from daemon_logs_order queue_policy
                      daemon_resume_from_hostile daemon_resume_from_stop
                      daemon_private_state
                      daemon_data_shrink daemon_blas_core
                      daemon_sweep_readable)
foreach(t ${GPTD_DAEMON_TESTS})
  add_test(NAME ${t}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh $<TARGET_FILE:gptd>
                   $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
  set_tests_properties(${t} PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
# Sanitized, its 600 MB copies run several times slower (its deadlines
# scale by GPTD_SANITIZED; about 2.5 minutes under TSan on two cores).
if(GPTD_SANITIZE)
  set_tests_properties(daemon_resume_from_hostile PROPERTIES TIMEOUT 900)
endif()
# daemon_statedir_gone: STATE_DIR (or its database) removed or replaced
# under a running gptd: submits refused, gptctl status and systemd's
# STATUS= (through tests/tools/notify_listen) say so.
add_test(NAME daemon_statedir_gone
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/daemon_statedir_gone.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:notify_listen>)
set_tests_properties(daemon_statedir_gone PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# daemon_init_shrink: a model.init_from GGUF truncated between two of the
# worker's reads (held by tests/tools/pread_pause, an LD_PRELOAD library):
# that job fails naming the file, gptd goes on.
add_library(pread_pause SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tools/pread_pause.c)
target_compile_options(pread_pause PRIVATE -Wall -Wextra -Werror)
target_link_libraries(pread_pause PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME daemon_init_shrink
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/daemon_init_shrink.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:pread_pause>)
set_tests_properties(daemon_init_shrink PROPERTIES LABELS integration TIMEOUT 180
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# The README's command blocks pasted in order (tests/tools/readme_blocks.py
# extracts them), the Quick start's demo.sh included, every job at a 400th
# of its steps.
add_test(NAME readme_examples
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/readme_examples.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(readme_examples PROPERTIES LABELS integration TIMEOUT 900
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# daemon_resume_transport: a resume that changes distributed.comm_shm and
# distributed.shard_buffers trains the same bits as one that does not.
add_test(NAME daemon_resume_transport
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/daemon_resume_transport.sh
                 $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client>
                 ${CMAKE_SOURCE_DIR} $<TARGET_FILE:snapdiff>)
set_tests_properties(daemon_resume_transport PROPERTIES LABELS integration TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
