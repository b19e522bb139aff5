# etc/slurm/gptd.sbatch under a private Slurm cluster (two emulated nodes):
# a run, a requeue that resumes from the newest snapshot, sbatch --resume.
# Skipped (77) with a message when Slurm is missing or the test is not root.
add_test(NAME slurm_sbatch COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/slurm.sh
                                   $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl>
                                   $<TARGET_FILE:itest_client>
                                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/jobs/tiny_adder.json)
set_tests_properties(slurm_sbatch PROPERTIES LABELS integration TIMEOUT 420 SKIP_RETURN_CODE 77
                     RUN_SERIAL TRUE ENVIRONMENT "OMP_NUM_THREADS=1")
