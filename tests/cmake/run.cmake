# Integration tests of `gptd run` (issue: engine, snapshots, DDP).
set(GPTD_JOBS ${CMAKE_CURRENT_SOURCE_DIR}/integration/jobs)
set(GPTD_IT ${CMAKE_CURRENT_SOURCE_DIR}/integration)
add_test(NAME run_resume COMMAND ${GPTD_IT}/run_resume.sh $<TARGET_FILE:gptd>
                                 $<TARGET_FILE:snapdiff> ${GPTD_JOBS}/tiny_adder.json)
add_test(NAME run_corrupt COMMAND ${GPTD_IT}/run_corrupt.sh $<TARGET_FILE:gptd>
                                  ${GPTD_JOBS}/tiny_adder.json)
add_test(NAME run_snapshot_safety COMMAND ${GPTD_IT}/run_snapshot_safety.sh $<TARGET_FILE:gptd>
                                          ${GPTD_JOBS}/tiny_adder.json)
add_test(NAME run_learn COMMAND ${GPTD_IT}/run_learn.sh $<TARGET_FILE:gptd>
                                ${GPTD_JOBS}/learn_adder.json)
add_test(NAME ddp_equiv COMMAND ${GPTD_IT}/ddp_equiv.sh $<TARGET_FILE:gptd>
                                $<TARGET_FILE:snapdiff> ${GPTD_JOBS}/tiny_adder.json)
add_test(NAME ddp_resize COMMAND ${GPTD_IT}/ddp_resize.sh $<TARGET_FILE:gptd>
                                 $<TARGET_FILE:snapdiff> ${GPTD_JOBS}/tiny_adder.json)
set_tests_properties(run_resume run_corrupt run_snapshot_safety run_learn ddp_equiv ddp_resize PROPERTIES
                     LABELS integration TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME shard_equiv COMMAND ${GPTD_IT}/shard_equiv.sh $<TARGET_FILE:gptd>
                                  $<TARGET_FILE:snapdiff> ${GPTD_JOBS}/tiny_adder.json)
add_test(NAME shard_resume COMMAND ${GPTD_IT}/shard_resume.sh $<TARGET_FILE:gptd>
                                   $<TARGET_FILE:snapdiff> ${GPTD_JOBS}/tiny_adder.json)
add_test(NAME batch_equiv COMMAND ${GPTD_IT}/batch_equiv.sh $<TARGET_FILE:gptd>
                                  $<TARGET_FILE:snapdiff> ${GPTD_JOBS}/tiny_adder.json)
add_test(NAME shard_export COMMAND ${GPTD_IT}/shard_export.sh $<TARGET_FILE:gptd>
                                   $<TARGET_FILE:fmt_convert> ${GPTD_JOBS}/tiny_adder.json)
set_tests_properties(shard_equiv shard_resume batch_equiv shard_export PROPERTIES LABELS integration TIMEOUT 600
                     ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME run_signal COMMAND ${GPTD_IT}/run_signal.sh $<TARGET_FILE:gptd>
                                 ${GPTD_JOBS}/tiny_adder.json)
set_tests_properties(run_signal PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME grad_reduce COMMAND ${GPTD_IT}/grad_reduce.sh $<TARGET_FILE:gptd>
                                  $<TARGET_FILE:snapdiff> ${GPTD_JOBS}/tiny_adder.json)
set_tests_properties(grad_reduce PROPERTIES LABELS integration TIMEOUT 600
                     ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME run_comm_timeout COMMAND ${GPTD_IT}/run_comm_timeout.sh $<TARGET_FILE:gptd>
                                       ${GPTD_JOBS}/tiny_adder.json)
set_tests_properties(run_comm_timeout PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1")
# run_dir: each `gptd run` keeps a folder of its own (metrics.jsonl, spec,
# overrides, snapshots); a rerun is no refusal; gptctl plot reads folders;
# gptd run -m ends with its runs ranked.
add_test(NAME run_dir COMMAND ${GPTD_IT}/run_dir.sh $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl>)
set_tests_properties(run_dir PROPERTIES LABELS integration TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
