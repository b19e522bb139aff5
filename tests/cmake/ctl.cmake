# gptctl and the control dispatcher: what gptctl prints of user strings (escaped
# in tables, plain output and gptd's log; exact with --json), and its job
# file parser's bound on YAML nesting, and the limits the one dispatcher of
# control ops applies. Same arguments as the daemon tests.
set(GPTD_CTL_TESTS ctl_escape ctl_yaml_depth ctl_dispatch ctl_help ctl_frictions)
foreach(t ${GPTD_CTL_TESTS})
  add_test(NAME ${t}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.sh $<TARGET_FILE:gptd>
                   $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
  set_tests_properties(${t} PROPERTIES LABELS integration TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
# The bash completion against a stubbed bash-completion: formats after
# --format (not job ids), --lr, -m, --dtype, --wait, a.b= job keys; and
# the gptd completion against every option of `gptd [run|tokenize|export] --help`.
add_test(NAME ctl_completion COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/ctl_completion.sh
                                     ${CMAKE_SOURCE_DIR} $<TARGET_FILE:gptd>)
set_tests_properties(ctl_completion PROPERTIES LABELS unit TIMEOUT 60)
# The zsh completion typed into a real interactive zsh (zsh/zpty, compinit):
# the same checks against gptctl's command table and gptd's --help texts.
# Skipped (77) only where zsh is not installed.
add_test(NAME ctl_completion_zsh COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/ctl_completion_zsh.sh
                                         ${CMAKE_SOURCE_DIR} $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl>)
set_tests_properties(ctl_completion_zsh PROPERTIES LABELS unit TIMEOUT 90 SKIP_RETURN_CODE 77)
