# The HTTP listener (daemon/http/http.c) scraped by a real Prometheus.
add_test(NAME http_prometheus
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/http_prometheus.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(http_prometheus PROPERTIES LABELS integration TIMEOUT 180
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# A stand-in libnvidia-ml.so.1 for the dlopen path (daemon/node/nvml.c) on hosts
# without a GPU: test_metrics_text loads it by path.
add_library(fake_nvml SHARED ${CMAKE_CURRENT_SOURCE_DIR}/unit/fake_nvml.c)
target_compile_options(fake_nvml PRIVATE -Wall -Wextra -Werror)
target_compile_definitions(test_metrics_text PRIVATE GPTD_FAKE_NVML="$<TARGET_FILE:fake_nvml>")
add_dependencies(test_metrics_text fake_nvml)

# The dashboard comparing two jobs in headless chromium
# (tests/integration/dashboard_cdp.js);
# the screenshot goes to build/Testing/artifacts/http_dashboard.png.
add_test(NAME http_dashboard
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/http_dashboard.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR}/Testing/artifacts)
set_tests_properties(http_dashboard PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# test_nvml_text samples the heartbeat's GPU text through the same stand-in.
target_compile_definitions(test_nvml_text PRIVATE GPTD_FAKE_NVML="$<TARGET_FILE:fake_nvml>")
add_dependencies(test_nvml_text fake_nvml)

# GPU columns of gptctl nodes (through the stand-in NVML) and per-rank
# step time of a 2-worker job in gptctl status.
add_test(NAME gpu_telemetry
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/gpu_telemetry.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:fake_nvml>)
set_tests_properties(gpu_telemetry PROPERTIES LABELS integration TIMEOUT 60
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# The loopback listener against DNS rebinding (Host: checks) and against
# 100 idle and 20 slow connections (issue 36, cases 8 and 10).
add_test(NAME http_hostile
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/http_hostile.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(http_hostile PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# The connection limit with a real gptd: idle connections make room, busy
# ones make a newcomer get 503 at once, stalled replies time out (case 10).
add_test(NAME http_busy
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/http_busy.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(http_busy PROPERTIES LABELS integration TIMEOUT 180
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# The shipped Grafana dashboard and Prometheus alert rules (etc/grafana,
# etc/prometheus) queried on a real Prometheus; the CSV outputs.
add_test(NAME http_prometheus_rules
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/http_prometheus_rules.sh
                 $<TARGET_FILE:gptd> $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client>
                 ${CMAKE_SOURCE_DIR} $<TARGET_FILE:fake_nvml>)
set_tests_properties(http_prometheus_rules PROPERTIES LABELS integration TIMEOUT 180
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# Each of those alert rules made to fire (and kept quiet on healthy series)
# by `promtool test rules` on tests/prometheus/gptd-alerts.test.yml.
add_test(NAME prometheus_alert_rules
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/prometheus_alert_rules.sh
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(prometheus_alert_rules PROPERTIES LABELS unit TIMEOUT 60)

# A job's last samples: each `gptctl sample` reply kept (capped by
# sample_history), read back by `gptctl samples` and /api/jobs/ID/samples.
add_test(NAME daemon_samples
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/daemon_samples.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(daemon_samples PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
