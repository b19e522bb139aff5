# Operating gptd: the systemd unit, service notifications, the man pages and
# the Debian package (systemd/, daemon/base/notify.c, packaging/).
add_executable(notify_listen ${CMAKE_CURRENT_SOURCE_DIR}/tools/notify_listen.c)
gptd_target(notify_listen)

set(GPTD_IT ${CMAKE_CURRENT_SOURCE_DIR}/integration)

# The unit, sysusers and tmpfiles snippets as systemd's own tools read them.
add_test(NAME ops_unit_verify COMMAND ${GPTD_IT}/unit_verify.sh $<TARGET_FILE:gptd>
                                      ${CMAKE_SOURCE_DIR})
# Type=notify: READY=1 only once the control socket accepts, RELOADING=1 on
# SIGHUP, STOPPING=1 on SIGTERM; WATCHDOG=1 pings and STATUS= lines.
add_test(NAME ops_notify COMMAND ${GPTD_IT}/notify.sh $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl>
                                 $<TARGET_FILE:notify_listen> basic)
add_test(NAME ops_notify_watchdog
         COMMAND ${GPTD_IT}/notify.sh $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl>
                 $<TARGET_FILE:notify_listen> watchdog)
# Every man page renders without a warning (gptd-job.5 is built by the
# `man` target in packaging/cpack.cmake), and gptd.conf(5) documents every
# option in daemon/base/config.c's table.
add_test(NAME ops_man_lint COMMAND ${GPTD_IT}/man_lint.sh ${CMAKE_SOURCE_DIR}/packaging/man
                                   ${CMAKE_BINARY_DIR}/man $<TARGET_FILE:gptd>)
set_tests_properties(ops_unit_verify ops_notify ops_notify_watchdog ops_man_lint PROPERTIES
                     LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# The .deb: cpack from this build, install, train a job with the installed
# programs, remove. Needs root and changes the host while it runs (the
# package, the gptd user); skipped when gptd is already installed.
add_test(NAME ops_deb COMMAND ${GPTD_IT}/deb.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(ops_deb PROPERTIES LABELS "integration;slow" TIMEOUT 300
                     SKIP_RETURN_CODE 77 RUN_SERIAL ON
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
