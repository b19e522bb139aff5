# Issue 14: a stop during set-up ends a world larger than one during its
# set-up (engine/trainer.c; the unit side is tests/unit/test_trainer_stop.c).
add_test(NAME run_setup_stop
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/run_setup_stop.sh $<TARGET_FILE:gptd>
                 ${CMAKE_CURRENT_SOURCE_DIR}/integration/jobs/tiny_adder.json)
set_tests_properties(run_setup_stop PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1")
